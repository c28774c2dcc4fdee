"""A view limited by ``@limit`` on a path the middleware's rules limit too."""

from django.urls import path

from django_site import views

urlpatterns = [path("api/login", views.login)]

from django.urls import path

from django_site import views

urlpatterns = [
    path("api/items", views.items),
    path("async/api/items", views.async_items),
    path("health", views.health),
    path("login", views.login),
    path("async/login", views.async_login),
    path("report", views.Report.as_view()),
    path("async/report", views.AsyncReport.as_view()),
    path("export", views.Export.as_view()),
    path("stream", views.stream),
    path("drf/items", views.ItemsAPI.as_view()),
    path("drf/uploads", views.UploadsAPI.as_view()),
    path("drf/open", views.OpenAPI.as_view()),
    path("drf/user", views.UserAPI.as_view()),
    path("routed/drf", views.RoutedAPI.as_view()),
]

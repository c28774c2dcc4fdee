"""``docs/recipes/openai-workers.md``'s client, as the page writes it, against a local server speaking OpenAI's
fields (requests and tokens budgets, Go-duration resets)."""

from __future__ import annotations

import asyncio
from typing import Any

import ratekeeper as rk
from _docs import page_namespace
from conftest import ServeApi, Served


def recipe(served: Served) -> tuple[dict[str, Any], Any]:
    namespace = page_namespace("docs/recipes/openai-workers.md", "client")
    # The page's region was a file in a folder that is gone: the same limiter in memory (the multi-process
    # tests cover rk.Shared).
    namespace["lim"] = rk.Limiter(rules=[])
    return namespace, namespace["openai_client"]("sk-test", base_url=f"{served.url}/v1")


def test_the_recipes_client_reads_both_budgets_and_gives_back_unused_tokens(serve_api: ServeApi) -> None:
    served = serve_api("openai", 10, 60.0, tokens=2000)
    namespace, client = recipe(served)

    async def main() -> list[str]:
        async with client:
            return [await namespace["ask"](client, "What is six times seven?") for _ in range(3)]

    assert asyncio.run(main()) == ["42"] * 3
    lim: rk.Limiter = namespace["lim"]
    host = served.url.removeprefix("http://")
    assert {f"{host} requests", f"{host} tokens"} <= set(lim.groups)
    (key,) = client._transport.stats()
    stats = client._transport.stats()[key]
    assert stats["dialect"] == "openai"
    # Each call's prompt is 6 tokens and its answer 20 of the 200 it may have: 26 spent a call, not 206.
    assert stats["remaining"] == {"requests": 7, "tokens": 2000 - 3 * 26}
    assert sum(served.api.tokens_used.values()) == 3 * 26


def test_the_recipes_client_keeps_several_tasks_under_both_budgets(serve_api: ServeApi) -> None:
    # 12 requests and 500 tokens a minute (OpenAI's budgets are per minute, as the recipe's window says): each
    # call estimates 206 tokens, so two at a time go until the unused tokens come back.
    served = serve_api("openai", 12, 60.0, tokens=500)
    namespace, client = recipe(served)

    async def main() -> list[str]:
        async with client:
            return list(
                await asyncio.gather(*(namespace["ask"](client, "What is six times seven?") for _ in range(12)))
            )

    assert asyncio.run(main()) == ["42"] * 12
    assert served.api.refused == 0

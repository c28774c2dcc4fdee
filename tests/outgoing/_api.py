"""A rate-limited API to call: a pure ASGI app that speaks one server dialect of rate-limit fields, counts
what it receives in fixed windows of its own, and answers 429 with ``Retry-After`` past its limit.

Dialects: ``ietf`` (``RateLimit`` / ``RateLimit-Policy``), ``x-ratelimit`` (reset in seconds),
``x-ratelimit-epoch`` (reset as epoch seconds), ``github``, ``openai`` (requests and tokens, Go durations) and
``anthropic`` (requests and tokens, RFC 3339). A JSON body ``{"tokens": n}`` spends ``n`` tokens (``openai``,
``anthropic``); ``{"tokens": n, "used": m}`` spends ``m`` instead, which the answer's
``{"usage": {"total_tokens": m}}`` reports; a chat completion's body (``messages``, ``max_tokens``) spends its
prompt's characters / 4 and at most 20 tokens of answer.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from typing import Any

Scope = dict[str, Any]


def go_duration(seconds: float) -> str:
    """Seconds as Go's ``time.Duration.String()`` writes them: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds < 1:
        return f"{max(math.ceil(seconds * 1000), 1)}ms"
    if seconds < 60:
        return f"{math.ceil(seconds * 1000) / 1000:g}s"
    minutes, rest = divmod(math.ceil(seconds), 60)
    return f"{minutes}m{rest}s"


def rfc3339(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def request_body(receive: Any) -> bytes:
    """An ASGI request's whole body."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


class LimitedApi:
    """The app. ``limit`` requests (and ``tokens`` tokens, for the dialects that count them) per ``window``
    seconds, windows counted from the app's creation.

    Attributes:
        accepted: requests answered 200, by window index.
        refused: requests answered 429; refused_in: by window index.
        tokens_used: tokens spent, by window index.
        override: header values served instead of the computed ones (``{name: value}``), for fuzzing.
    """

    def __init__(self, dialect: str, limit: int, window: float, *, tokens: int | None = None) -> None:
        self.dialect, self.limit, self.window, self.tokens = dialect, limit, window, tokens
        self.start = time.monotonic()
        self.accepted: Counter[int] = Counter()
        self.tokens_used: Counter[int] = Counter()
        self.refused = 0
        self.refused_in: Counter[int] = Counter()
        self.override: dict[str, str] = {}
        self.status_override: int | None = None
        self._lock = threading.Lock()

    def now_window(self) -> tuple[int, float]:
        """The current window's index and seconds to its end."""
        elapsed = time.monotonic() - self.start
        index = int(elapsed // self.window)
        return index, (index + 1) * self.window - elapsed

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await request_body(receive)
        asked: dict[str, Any] = json.loads(body) if body else {}
        if "messages" in asked:  # a chat completion: its prompt (4 characters a token) and at most 20 more
            prompt = sum(len(str(message.get("content", ""))) for message in asked["messages"]) // 4
            want_tokens = prompt + int(asked.get("max_tokens", 0))
            used_tokens = prompt + min(int(asked.get("max_tokens", 0)), 20)
        else:
            want_tokens = int(asked.get("tokens", 0))
            used_tokens = int(asked.get("used", want_tokens))
        with self._lock:
            index, reset = self.now_window()
            over = self.accepted[index] >= self.limit
            if self.tokens is not None and self.tokens_used[index] + used_tokens > self.tokens:
                over = True
            if over:
                self.refused += 1
                self.refused_in[index] += 1
            else:
                self.accepted[index] += 1
                self.tokens_used[index] += used_tokens
            remaining = self.limit - self.accepted[index]
            tokens_left = None if self.tokens is None else self.tokens - self.tokens_used[index]
        status = 429 if over else 200
        headers = self.fields(remaining, tokens_left, reset)
        if over:
            headers.append(("retry-after", str(math.ceil(reset))))
        if self.status_override is not None:
            status = self.status_override
        for name, value in self.override.items():
            headers = [(key, old) for key, old in headers if key != name]
            headers.append((name, value))
        reply: dict[str, Any] = {"usage": {"total_tokens": used_tokens}}
        if "messages" in asked:
            reply["choices"] = [{"message": {"role": "assistant", "content": "42"}}]
        answer = json.dumps(reply if not over else {"error": "rate limited"})
        raw = [(key.encode("latin-1"), value.encode("latin-1")) for key, value in headers]
        raw.append((b"content-type", b"application/json"))
        await send({"type": "http.response.start", "status": status, "headers": raw})
        await send({"type": "http.response.body", "body": answer.encode()})

    def fields(self, remaining: int, tokens_left: int | None, reset: float) -> list[tuple[str, str]]:
        """The rate-limit fields of the dialect, for a window with ``remaining`` left for ``reset`` seconds."""
        dialect, limit = self.dialect, self.limit
        whole = str(math.ceil(reset))
        epoch = str(math.ceil(time.time() + reset))
        if dialect == "ietf":
            window = math.ceil(self.window)
            return [
                ("ratelimit-policy", f'"api";q={limit};w={window}'),
                ("ratelimit", f'"api";r={remaining};t={whole}'),
            ]
        if dialect == "x-ratelimit":
            return [
                ("x-ratelimit-limit", str(limit)),
                ("x-ratelimit-remaining", str(remaining)),
                ("x-ratelimit-reset", whole),
            ]
        if dialect == "x-ratelimit-epoch":
            return [
                ("x-ratelimit-limit", str(limit)),
                ("x-ratelimit-remaining", str(remaining)),
                ("x-ratelimit-reset", epoch),
            ]
        if dialect == "github":
            return [
                ("x-ratelimit-limit", str(limit)),
                ("x-ratelimit-remaining", str(remaining)),
                ("x-ratelimit-used", str(limit - remaining)),
                ("x-ratelimit-reset", epoch),
                ("x-ratelimit-resource", "core"),
            ]
        if dialect == "openai":
            fields = [
                ("x-ratelimit-limit-requests", str(limit)),
                ("x-ratelimit-remaining-requests", str(remaining)),
                ("x-ratelimit-reset-requests", go_duration(reset)),
            ]
            if tokens_left is not None:
                fields += [
                    ("x-ratelimit-limit-tokens", str(self.tokens)),
                    ("x-ratelimit-remaining-tokens", str(tokens_left)),
                    ("x-ratelimit-reset-tokens", go_duration(reset)),
                ]
            return fields
        if dialect == "anthropic":
            at = rfc3339(time.time() + reset)
            fields = [
                ("anthropic-ratelimit-requests-limit", str(limit)),
                ("anthropic-ratelimit-requests-remaining", str(remaining)),
                ("anthropic-ratelimit-requests-reset", at),
            ]
            if tokens_left is not None:
                fields += [
                    ("anthropic-ratelimit-tokens-limit", str(self.tokens)),
                    ("anthropic-ratelimit-tokens-remaining", str(tokens_left)),
                    ("anthropic-ratelimit-tokens-reset", at),
                ]
            return fields
        raise AssertionError(f"no dialect {dialect!r}")

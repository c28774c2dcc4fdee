"""A rate-limited API to call: a pure ASGI app that speaks one server dialect of rate-limit fields, counts
what it receives, and answers 429 with ``Retry-After`` past its limit.

Dialects: ``ietf`` (``RateLimit`` / ``RateLimit-Policy``), ``ietf-down`` (the same, ``t`` rounded down, as
``int(end - now)`` has it), ``ietf-refill`` (the same fields from a bucket, ``t`` the seconds until its next unit,
as a GCRA server says them), ``x-ratelimit`` (reset in seconds),
``x-ratelimit-epoch`` (reset as epoch seconds), ``github``, ``openai`` (requests and tokens, Go durations) and
``anthropic`` (requests and tokens, RFC 3339). OpenAI's and Anthropic's budgets are buckets, as theirs are:
full at ``limit`` (``tokens``), refilled all the time at that many per ``window``, their reset the time until
full again; the others count in fixed windows of their own, their reset the window's end. A JSON body
``{"tokens": n}`` spends ``n`` tokens (``openai``, ``anthropic``); ``{"tokens": n, "used": m}`` spends ``m``
instead, which the answer's ``{"usage": {"total_tokens": m}}`` reports; a chat completion's body
(``messages``, ``max_tokens``) spends its prompt's characters / 4 and at most 20 tokens of answer.
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
        # OpenAI's and Anthropic's buckets: (requests, tokens) left, as of `_filled`.
        self.refills = dialect in ("openai", "anthropic", "ietf-refill")
        self._level = [float(limit), float(tokens or 0)]
        self._filled = self.start

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
            tokens_reset = reset
            if self.refills:
                over, remaining, tokens_left, (reset, tokens_reset) = self.from_bucket(used_tokens)
                if self.dialect == "ietf-refill":  # t: when its next unit comes
                    level = self._level[0]
                    reset = 0.0 if level >= self.limit else (1 - level % 1) * self.window / self.limit
            else:
                over = self.accepted[index] >= self.limit
                if self.tokens is not None and self.tokens_used[index] + used_tokens > self.tokens:
                    over = True
            if over:
                self.refused += 1
                self.refused_in[index] += 1
            else:
                self.accepted[index] += 1
                self.tokens_used[index] += used_tokens
            if not self.refills:
                remaining = self.limit - self.accepted[index]
                tokens_left = None if self.tokens is None else self.tokens - self.tokens_used[index]
        status = 429 if over else 200
        headers = self.fields(remaining, tokens_left, reset, tokens_reset)
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

    def from_bucket(self, used_tokens: int) -> tuple[bool, int, int | None, tuple[float, float]]:
        """Spends a request and ``used_tokens`` from the buckets, refilled since they were last: whether the
        call is over, what is left of each, and the seconds until each is full again."""
        now = time.monotonic()
        sizes = (float(self.limit), float(self.tokens or 0))
        for budget, size in enumerate(sizes):
            self._level[budget] = min(size, self._level[budget] + (now - self._filled) * size / self.window)
        self._filled = now
        over = self._level[0] < 1 or (self.tokens is not None and self._level[1] < used_tokens)
        if not over:
            self._level[0] -= 1
            self._level[1] -= used_tokens
        requests_full, tokens_full = (
            (size - level) * self.window / size if size else 0.0 for size, level in zip(sizes, self._level, strict=True)
        )
        tokens_left = None if self.tokens is None else math.floor(self._level[1])
        return over, math.floor(self._level[0]), tokens_left, (requests_full, tokens_full)

    def fields(
        self, remaining: int, tokens_left: int | None, reset: float, tokens_reset: float | None = None
    ) -> list[tuple[str, str]]:
        """The rate-limit fields of the dialect, with ``remaining`` left for ``reset`` seconds (the tokens'
        ``tokens_left`` for ``tokens_reset``, by default the same)."""
        tokens_reset = reset if tokens_reset is None else tokens_reset
        dialect, limit = self.dialect, self.limit
        whole = str(math.ceil(reset))
        epoch = str(math.ceil(time.time() + reset))
        if dialect in ("ietf", "ietf-refill", "ietf-down"):
            window = math.ceil(self.window)
            t = math.floor(reset) if dialect == "ietf-down" else whole
            return [
                ("ratelimit-policy", f'"api";q={limit};w={window}'),
                ("ratelimit", f'"api";r={remaining};t={t}'),
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
                    ("x-ratelimit-reset-tokens", go_duration(tokens_reset)),
                ]
            return fields
        if dialect == "anthropic":
            at, tokens_at = rfc3339(time.time() + reset), rfc3339(time.time() + tokens_reset)
            fields = [
                ("anthropic-ratelimit-requests-limit", str(limit)),
                ("anthropic-ratelimit-requests-remaining", str(remaining)),
                ("anthropic-ratelimit-requests-reset", at),
            ]
            if tokens_left is not None:
                fields += [
                    ("anthropic-ratelimit-tokens-limit", str(self.tokens)),
                    ("anthropic-ratelimit-tokens-remaining", str(tokens_left)),
                    ("anthropic-ratelimit-tokens-reset", tokens_at),
                ]
            return fields
        raise AssertionError(f"no dialect {dialect!r}")

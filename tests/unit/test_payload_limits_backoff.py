from __future__ import annotations

import math

import pytest

import readyq
from readyq.payload import MAX_DEPTH, decode, encode
from readyq.planning.backoff import retry_delay
from readyq.planning.caps import current_cap, normalize


@pytest.mark.parametrize(
    "value",
    [None, 0, "héllo ☃", [1, 2.5, True], {"nested": {"list": [None, {"x": "y"}]}}],
)
def test_json_round_trips_exactly(value: object) -> None:
    assert decode(encode(value, max_bytes=10_000)) == value


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), {1, 2}, object(), b"bytes", {"k": math.nan}]
)
def test_non_json_values_are_refused(value: object) -> None:
    with pytest.raises(readyq.PayloadNotJSON):
        encode(value, max_bytes=10_000)


def test_size_limit_counts_utf8_bytes_of_the_compact_encoding() -> None:
    text = "é" * 10  # 2 bytes each, plus two quotes
    assert encode(text, max_bytes=22) == '"' + text + '"'
    with pytest.raises(readyq.PayloadTooLarge, match="23 bytes"):
        encode(text + "a", max_bytes=22)


def test_deep_nesting_is_refused_without_recursion_errors() -> None:
    value: object = []
    for _ in range(MAX_DEPTH + 1):
        value = [value]
    with pytest.raises(readyq.PayloadNotJSON, match="nested deeper"):
        encode(value, max_bytes=10**9)
    hostile: object = []
    for _ in range(100_000):
        hostile = [hostile]
    with pytest.raises(readyq.PayloadNotJSON):
        encode(hostile, max_bytes=10**9)


def test_a_payload_that_contains_itself_is_refused_and_the_encoder_still_works() -> None:
    loop: dict[str, object] = {"a": 1}
    loop["self"] = loop
    with pytest.raises(readyq.PayloadNotJSON, match="contain themselves"):
        encode(loop, max_bytes=10**9)
    shared = {"ok": True}  # one object encoded twice in one payload is not a loop
    assert encode([shared, shared, "é"], max_bytes=100) == '[{"ok":true},{"ok":true},"é"]'


def test_backoff_doubles_and_caps() -> None:
    exact = [retry_delay(a, base=1.0, maximum=10.0, jitter=0.0) for a in range(1, 7)]
    assert exact == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]


def test_backoff_jitter_stays_within_its_band() -> None:
    assert retry_delay(3, base=1.0, jitter=0.1, rand=lambda: 0.0) == pytest.approx(3.6)
    assert retry_delay(3, base=1.0, jitter=0.1, rand=lambda: 1.0) == pytest.approx(4.4)


def test_cap_is_the_minimum_of_numbers_and_callables_read_each_time() -> None:
    budget = iter([7, 2, 9])
    limits = normalize([5, lambda: next(budget)])
    assert [current_cap(limits) for _ in range(3)] == [5, 2, 5]


def test_a_limit_that_raises_or_returns_garbage_counts_as_zero(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> int:
        raise RuntimeError("gpu probe down")

    assert current_cap(normalize([4, broken])) == 0
    assert current_cap(normalize(lambda: "3")) == 0  # type: ignore[arg-type, return-value]
    assert current_cap(normalize(lambda: -2)) == 0


@pytest.mark.parametrize("bad", [[], -1, True, "4", 2.5, [3, None]])
def test_invalid_limits_are_configuration_errors(bad: object) -> None:
    with pytest.raises(readyq.ConfigurationError):
        normalize(bad)  # type: ignore[arg-type]

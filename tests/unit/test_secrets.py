"""Secret handling: the environment wins, and text leaving the process is scrubbed."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from tests.conftest import LINEAR_KEY, OPERATOR_TOKEN, WEBHOOK_SECRET
from wakeline.config import Config
from wakeline.service.logs import RedactingFormatter
from wakeline.secrets import LEARNED_KEPT, REDACTED, Secrets, load_secrets, redact


def test_redact_scrubs_every_held_secret() -> None:
    """Each held secret, wherever and however often it appears, becomes [redacted]."""
    text = f"hook={WEBHOOK_SECRET} auth=Bearer {OPERATOR_TOKEN} again {WEBHOOK_SECRET}."
    out = redact(text, [WEBHOOK_SECRET, OPERATOR_TOKEN])
    assert WEBHOOK_SECRET not in out and OPERATOR_TOKEN not in out
    assert out == f"hook={REDACTED} auth=Bearer {REDACTED} again {REDACTED}."


def test_redact_scrubs_overlapping_secrets_longest_first() -> None:
    """A secret that contains another is scrubbed whole, leaving no tail behind."""
    short, long = "abcd1234", "abcd1234-and-more-secret"
    assert redact(f"x {long} y {short}", [short, long]) == f"x {REDACTED} y {REDACTED}"


@pytest.mark.parametrize(
    "key",
    [LINEAR_KEY, "lin_api_0123456789ABCDEFabcdef0123456789abcdef", "lin_oauth_abcdefgh12345678"],
)
def test_redact_scrubs_linear_key_shapes_even_when_not_held(key: str) -> None:
    """Anything shaped like a Linear API or OAuth key is scrubbed without being known."""
    out = redact(f"Authorization: {key}\n", [])
    assert key not in out and "lin_" not in out
    assert out == f"Authorization: {REDACTED}\n"


def test_redact_leaves_ordinary_text_alone() -> None:
    """Text without secrets is unchanged; too-short values are not treated as secrets."""
    text = "lin_api_ is the prefix; abc and lin_api_short stay"
    assert redact(text, ["abc", ""]) == text


def test_load_secrets_prefers_the_environment_over_files(tmp_path: Path) -> None:
    """$WAKELINE_LINEAR_WEBHOOK_SECRET and $WAKELINE_LINEAR_API_KEY win over the secret files."""
    config = Config(base_dir=tmp_path)
    hook = config.path(config.linear.webhook_secret_file)
    hook.parent.mkdir(parents=True)
    hook.write_text("from-file\n")
    config.path(config.linear.api_key_file).write_text("  \n")
    from_files = load_secrets(config, {})
    assert from_files.webhook_secret.get_secret_value() == "from-file"  # type: ignore[union-attr]
    assert from_files.linear_api_key is None  # blank file: no key, local backend
    env = {"WAKELINE_LINEAR_WEBHOOK_SECRET": " from-env ", "WAKELINE_LINEAR_API_KEY": LINEAR_KEY}
    loaded = load_secrets(config, env)
    assert loaded.webhook_secret.get_secret_value() == "from-env"  # type: ignore[union-attr]
    assert loaded.linear_api_key.get_secret_value() == LINEAR_KEY  # type: ignore[union-attr]
    assert loaded.operator_token is None
    assert WEBHOOK_SECRET not in repr(loaded) and "from-env" not in repr(loaded)


def test_secrets_values_lists_only_what_is_held(secrets: Secrets) -> None:
    """values() feeds the redactor every secret that is set."""
    assert sorted(secrets.values()) == sorted([WEBHOOK_SECRET, LINEAR_KEY, OPERATOR_TOKEN])
    assert Secrets(None, None, None).values() == []


# --- the log formatter ---------------------------------------------------------------------------


@pytest.fixture
def log_stream() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger writing through the RedactingFormatter into a buffer."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter([WEBHOOK_SECRET, OPERATOR_TOKEN]))
    logger = logging.getLogger("wakeline.tests.redaction")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


LogStream = tuple[logging.Logger, io.StringIO]


def test_formatter_scrubs_secrets_in_the_message(log_stream: LogStream) -> None:
    """A secret interpolated into a log message is scrubbed."""
    logger, stream = log_stream
    logger.info("verifying with %s and %s", WEBHOOK_SECRET, LINEAR_KEY)
    out = stream.getvalue()
    assert WEBHOOK_SECRET not in out and LINEAR_KEY not in out
    assert f"verifying with {REDACTED} and {REDACTED}" in out


def test_formatter_scrubs_secrets_in_extra_fields(log_stream: LogStream) -> None:
    """Structured extra= fields are appended as key=value and scrubbed too."""
    logger, stream = log_stream
    logger.warning("request refused", extra={"authorization": f"Bearer {OPERATOR_TOKEN}",
                                             "headers": {"Linear-Signature": WEBHOOK_SECRET},
                                             "delivery_id": "d-1"})
    out = stream.getvalue()
    assert OPERATOR_TOKEN not in out and WEBHOOK_SECRET not in out
    assert "request refused" in out and "delivery_id='d-1'" in out
    assert f"authorization='Bearer {REDACTED}'" in out


def test_formatter_scrubs_secrets_in_tracebacks(log_stream: LogStream) -> None:
    """An exception message quoting a secret is scrubbed in the logged traceback."""
    logger, stream = log_stream
    try:
        raise ValueError(f"bad secret {WEBHOOK_SECRET}")
    except ValueError:
        logger.exception("failed")
    out = stream.getvalue()
    assert "Traceback" in out and "ValueError: bad secret" in out
    assert WEBHOOK_SECRET not in out


def test_tokens_learned_at_run_time_are_scrubbed_by_every_holder_of_the_list() -> None:
    held = Secrets(SecretStr("w" * 12), None, None, client_secret=SecretStr("c" * 12))
    shared = held.values()  # what the log formatter and the journal were given at start-up
    held.remember("fake-access-0123456789")
    assert redact("token fake-access-0123456789 and " + "c" * 12, shared) == \
        "token [redacted] and [redacted]"
    for n in range(40):
        held.remember(f"rotated-{n:04d}-token")
    assert len(shared) == 2 + LEARNED_KEPT and "rotated-0039-token" in shared
    assert "w" * 12 in shared and "c" * 12 in shared  # the fixed ones are never dropped


def test_every_linear_credential_shape_is_scrubbed() -> None:
    text = "lin_oauth_abcdef123456 lin_refresh_abcdef123456 lin_api_abcdef123456 lin_wh_abcdef123456"
    assert redact(text, []) == " ".join(["[redacted]"] * 4)

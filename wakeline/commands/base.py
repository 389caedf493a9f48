"""What every command shares: the `wakeline` group, the config and API context, output.

Exit codes: 0 done, 1 refused or failed, 2 usage or config error, 3 the server cannot be
reached.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, NoReturn

import click
import requests

from wakeline.commands.client import ApiError, NoToken, OperatorClient, Unreachable
from wakeline.config import CONFIG_ENV, Config, config_path, load_config
from wakeline.errors import ConfigError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
LONG_POLL_TIMEOUT_SECONDS = 40.0  # the service holds a long poll (a journal follow, an install) up to 20 s
# What to do about a refusal, by its error code.
NEXT_STEP = {
    "unauthorized": "the token was refused: the operator token is <state_dir>/operator.token; "
                    "run this as the user wakeline runs as",
    "lane_refused": "a turn's token may not do this: run it with the operator token",
    "not_found": "list what exists with `wakeline conversations` or `wakeline effects`",
    "conflict": "see its state with `wakeline conversations show ID` or `wakeline effects list`",
    "not_shown": "read the inbox first (`wakeline inbox`), then ack a cursor it showed",
    "requires_connected_linear": "connect Linear: `wakeline linear install` for the app (or a "
                                 "key in linear.api_key_file and a restart); see `wakeline doctor`",
    "install_refused": "run `wakeline linear install` again (docs/operations.md, Connecting "
                       "Linear)",
    "budget_exhausted": "wait for the budget to refill (retryAfterSeconds), or raise "
                        "linear.requests_per_hour",
    "possibly_dispatched": "check in Linear whether it happened before sending it again",
    "confirm_mismatch": "pass --confirm once for each id in targets, and nothing else",
    "unavailable": "the service's store or journal is busy or failing: see its log, then retry",
    "route_off": "`wakeline doctor` says why the Matrix route is off; fix that, then restart",
    "matrix_unavailable": "the Matrix connection is not up: see `wakeline status`, then retry",
}


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """Print to stderr and exit with `code`."""
    click.echo(f"wakeline: {message}", err=True)
    sys.exit(code)


@dataclass
class Context:
    """What every command shares: where the config is."""

    config_option: str | None

    @property
    def path(self) -> Path:
        """The config file's path (it may not exist)."""
        return config_path(self.config_option, dict(os.environ))

    def config(self) -> Config:
        """The loaded config, or exit 2 naming the key at fault."""
        try:
            explicit = self.config_option is not None or bool(os.environ.get(CONFIG_ENV))
            return load_config(self.path, required=explicit)
        except ConfigError as exc:
            fail(f"config error: {exc.key}: {exc.reason}", EXIT_USAGE)

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One operator API call, mapping failures to exit codes."""
        try:
            return OperatorClient.from_config(self.config()).request(method, path, **kwargs)
        except Unreachable as exc:
            fail(f"{exc}: is `wakeline serve` running with this config? (its operator API is "
                 "server.operator_host and server.operator_port)", EXIT_UNREACHABLE)
        except NoToken as exc:
            fail(f"{exc} (run `wakeline init` or `wakeline serve` first, or run this as the "
                 "user wakeline runs as)", EXIT_UNREACHABLE)
        except ApiError as exc:
            # A refusal also prints what its body adds (confirm targets, an effect id).
            extras = {k: v for k, v in exc.body.items() if k not in ("error", "detail")}
            hint = NEXT_STEP.get(str(exc.body.get("error")))
            fail(str(exc) + (f" {json.dumps(extras, ensure_ascii=False)}" if extras else "")
                 + (f"\n  next: {hint}" if hint else ""), EXIT_FAILED)


pass_ctx = click.make_pass_decorator(Context)


def emit(data: Any, as_json: bool, human: Callable[[Any], str]) -> None:
    """Print the API's JSON with --json, else the readable form."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False) if as_json else human(data))


json_option = click.option("--json", "as_json", is_flag=True, help="Print the API's JSON.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--config", "config_option", metavar="PATH", envvar=None,
              help="Config file (default: $WAKELINE_CONFIG, else ./wakeline.toml).")
@click.version_option(package_name="wakeline")
@click.pass_context
def cli(ctx: click.Context, config_option: str | None) -> None:
    """Let Linear drive command-line coding agents."""
    ctx.obj = Context(config_option)



def ago(stamp: str | None) -> str:
    """An API time as a person reads it: `12s ago`, `5m ago`, `3h ago`, `2d ago`."""
    if not stamp:
        return "-"
    try:
        moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)
    except ValueError:
        return stamp
    seconds = int((datetime.now(timezone.utc) - moment).total_seconds())
    if seconds < 0:
        return "just now"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"


STATE_COLOURS = {"idle": "green", "running": "cyan", "stalled": "red", "waiting_ownership": "yellow",
                 "terminal": "bright_black", "confirmed": "green", "rejected": "red",
                 "outcome_unknown": "yellow", "held": "yellow", "released": "bright_black"}


def coloured(state: str, width: int = 0) -> str:
    """A state, padded, in its colour (click drops colours when the output is not a terminal)."""
    return click.style(f"{state:<{width}}", fg=STATE_COLOURS.get(state.split(" ")[0]))



def text_argument(value: str, what: str) -> str:
    """`-` reads stdin, `@FILE` reads a file, anything else is the text itself."""
    if value == "-":
        return sys.stdin.read()
    if value.startswith("@"):
        try:
            return Path(value[1:]).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise click.UsageError(
                f"cannot read the {what} from {value[1:]}: {exc.__class__.__name__}") from None
    return value



def json_or_text(resp: requests.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return resp.text.strip()


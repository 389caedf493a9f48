"""The `wakeline` command line.

Every command but `init`, `serve`, `replay` and `demo` talks to the running
process through the operator API. Exit codes: 0 done, 1 refused or failed,
2 usage or config error, 3 the server cannot be reached.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, NoReturn

import click
import requests

from wakeline.client import ApiError, NoToken, OperatorClient, Unreachable
from wakeline.config import CONFIG_ENV, Config, config_path, load_config
from wakeline.errors import ConfigError
from wakeline.net import http_session

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
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


@cli.command()
@json_option
@pass_ctx
def init(ctx: Context, as_json: bool) -> None:
    """Write a commented config, the webhook secret and the operator token.

    Never overwrites: what exists is kept. Then edit the config's routes and run
    `wakeline doctor`, and `wakeline serve`.
    """
    from wakeline.scaffold import init_project

    try:
        report = init_project(ctx.path)
    except ConfigError as exc:
        fail(f"config error: {exc.key}: {exc.reason}", EXIT_USAGE)
    files = {"config": report.config, "webhookSecret": report.webhook_secret,
             "operatorToken": report.operator_token}
    data = {key: {"path": str(path), "created": created} for key, (path, created) in files.items()}
    labels = {"config": "config", "webhookSecret": "webhook secret", "operatorToken": "operator token"}
    emit(data, as_json, lambda d: "\n".join(
        f"{labels[k]}: {v['path']} ({'created' if v['created'] else 'kept'})" for k, v in d.items()))


@cli.command()
@pass_ctx
def serve(ctx: Context) -> None:
    """Serve the webhook ingress and the operator API until SIGINT/SIGTERM."""
    from wakeline.app import serve as run

    config = ctx.config()
    try:
        code = run(config)
    except ConfigError as exc:
        fail(f"config error: {exc.key}: {exc.reason}", EXIT_USAGE)
    except OSError as exc:
        fail(f"cannot serve: {exc}", EXIT_FAILED)
    sys.exit(code)


def _status_text(data: dict[str, Any]) -> str:
    conv, fifo = data["conversations"], data["fifo"]
    return "\n".join([
        f"wakeline {data['version']}, up {data['uptimeSeconds']:.0f}s",
        f"following: {'on' if data['following'] else 'off'}",
        f"conversations: {conv['total']} ({conv['running']} running, {conv['stalled']} stalled, "
        f"{conv['waitingOwnership']} waiting for ownership, {conv['terminal']} terminal: "
        f"{conv['completed']} completed, {conv['canceled']} canceled)",
        f"fifo: {fifo['pending']} pending, {fifo['claimed']} claimed",
        f"inbox: {data['inbox']['unread']} unread",
        f"live actors: {data['liveActors']}, threads: {data['threads']}",
        _linear_status(data.get("linear")),
        *_sandbox_status(data.get("sandbox")),
        *_matrix_status(data.get("matrix")),
        *_hosts_status(data.get("hosts")),
    ])


def _sandbox_status(sandbox: dict[str, Any] | None) -> list[str]:
    """How turns are confined: in red when they are not (CONTRACT section 12)."""
    if not sandbox:
        return []
    confined = sandbox["available"] and sandbox["mode"] != "none"
    head = "sandbox: " + (f"on ({sandbox['mode']})" if confined else
                          click.style("TURNS UNCONFINED", fg="red", bold=True) +
                          f" ({sandbox['mode']})")
    return [f"{head}: {sandbox['detail']}"]


def _hosts_status(hosts: list[dict[str, Any]] | None) -> list[str]:
    """One line per host sharing the work (only where there is more than this one)."""
    if not hosts or (len(hosts) == 1 and hosts[0]["alive"]):
        return []
    lines = [f"hosts: {sum(1 for h in hosts if h['alive'])} of {len(hosts)} alive"]
    for h in hosts:
        state = "alive" if h["alive"] else click.style("NOT ALIVE", fg="red", bold=True)
        lines.append(f"  {h['id']}: {state}, last seen {ago(h['lastSeen'])}, "
                     f"{h['running']} running")
    return lines


def _matrix_status(matrix: dict[str, Any] | None) -> list[str]:
    """One line per Matrix connection (a stall in red), then its routes that are off."""
    if not matrix:
        return []
    lines = []
    for c in matrix["connections"]:
        on = sum(1 for r in c["routes"] if r["on"])
        state = c["state"] if c["state"] == "ok" else click.style(c["state"].upper(), fg="red",
                                                                   bold=True)
        detail = f": {c['detail']}" if c["detail"] and c["state"] != "ok" else ""
        if c.get("held") and c["held"]["stalled"]:
            detail = f": event {c['held']['eventId']} in {c['held']['roomId']} cannot be " \
                     f"decrypted since {c['held']['since']}"
        lines.append(f"matrix {c['name']}: {state}{detail} ({on} of {len(c['routes'])} "
                     "routes on)")
        lines += [f"  route {r['name']} off: {r['detail']}" for r in c["routes"] if not r["on"]]
    pending = matrix["approvals"]["pending"]
    if pending:
        lines.append(f"approvals: {pending} pending (wakeline approvals)")
    return lines


def _linear_status(auth: dict[str, Any] | None) -> str:
    if not auth:
        return "linear: unknown"
    if auth["ok"]:
        return f"linear: ok ({auth['kind'].replace('_', ' ')}: {auth['detail']})"
    if auth["state"] == "none":
        return f"linear: {auth['detail']}"
    return (click.style("linear: NOT WORKING", fg="red", bold=True) + f" ({auth['state']}): "
            f"{auth['detail']}" + (f"\n  fix: {auth['fix']}" if auth.get("fix") else "")
            + "\n  answers wait and go out once a token works again")


@cli.command()
@json_option
@pass_ctx
def status(ctx: Context, as_json: bool) -> None:
    """Show the running service's status."""
    emit(ctx.call("GET", "/v1/status"), as_json, _status_text)


# --- doctor, effects and Linear ------------------------------------------------------------------

LINEAR_TIMEOUT_SECONDS = 60.0
JOURNAL_WAIT_TIMEOUT_SECONDS = 40.0  # the service holds a follow request up to 20 s  # the service waits up to ~40 s for Linear; answer before giving up


def _doctor_text(data: dict[str, Any]) -> str:
    lines = []
    for c in data["checks"]:
        mark = click.style("✓", fg="green") if c["ok"] else click.style("✗", fg="red", bold=True)
        lines.append(f"{mark} {c['name']}: {c['detail']}")
        if c.get("fix") and not c["ok"]:
            lines.append(f"    fix: {c['fix']}")
    lines.append("all checks passed" if data["ok"] else "some checks failed")
    return "\n".join(lines)


@cli.command()
@json_option
@pass_ctx
def doctor(ctx: Context, as_json: bool) -> None:
    """Check config, routes, agent commands, store, secrets, disk and the Linear credential,
    without calling Linear.

    With the service running it asks the service. Without, it checks what it can from
    the config (routes, agent commands, free ports, disk, the optional parts it turns on)
    and exits 3 after saying so.
    Exits 1 when a check fails.
    """
    try:
        data = OperatorClient.from_config(ctx.config()).request("GET", "/v1/doctor")
    except (Unreachable, NoToken) as exc:
        from wakeline.checks import local_checks

        checks = [c.to_json() for c in local_checks(ctx.config(), dict(os.environ))]
        data = {"ok": all(c["ok"] for c in checks), "checks": checks, "service": "not running"}
        emit(data, as_json, _doctor_text)
        fail(f"{exc}: start it with `wakeline serve` for the store, secret and Linear checks",
             EXIT_UNREACHABLE)
    except ApiError as exc:
        fail(str(exc))
    emit(data, as_json, _doctor_text)
    if not data.get("ok"):
        sys.exit(EXIT_FAILED)


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


def _effect_line(e: dict[str, Any]) -> str:
    error = f"  ({e['error']})" if e.get("error") else ""
    lines = [f"{e['id']}  {coloured(e['state'], 15)} {ago(e['createdAt']):>9}  {e['summary']}{error}"]
    lines += [f"    {coloured(h['state'], 9)} {ago(h['receivedAt']):>9}  {h['headline']}"
              for h in e.get("held", [])]
    return "\n".join(lines)


def _effects_text(data: dict[str, Any]) -> str:
    return "\n".join(_effect_line(e) for e in data["effects"]) or "no effects"


@cli.group(invoke_without_command=True)
@json_option
@click.pass_context
def effects(click_ctx: click.Context, as_json: bool) -> None:
    """List writes to Linear (outbound effects), or release one whose outcome is unknown."""
    if click_ctx.invoked_subcommand is None:
        emit(click_ctx.obj.call("GET", "/v1/webhook-effects"), as_json, _effects_text)


@effects.command("list")
@click.option("--state", type=click.Choice(["prepared", "dispatched", "confirmed", "rejected",
                                            "outcome_unknown", "released"]))
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@json_option
@pass_ctx
def effects_list(ctx: Context, state: str | None, limit: int, as_json: bool) -> None:
    """List effects, newest first."""
    data = ctx.call("GET", "/v1/webhook-effects", params={"state": state, "limit": limit})
    emit(data, as_json, _effects_text)


@effects.command("reconcile-absent")
@click.argument("effect_id")
@click.option("--verified-absent", is_flag=True,
              help="Required: you checked in Linear that the write is not there.")
@json_option
@pass_ctx
def effects_reconcile_absent(ctx: Context, effect_id: str, verified_absent: bool, as_json: bool) -> None:
    """Release an outcome_unknown effect you verified is absent in Linear (it is never re-sent)."""
    if not verified_absent:
        raise click.UsageError("check in Linear that the write is absent, then pass --verified-absent")
    data = ctx.call("POST", f"/v1/webhook-effects/{effect_id}/reconcile-absent",
                    json={"verified_absent": True})
    emit(data, as_json, lambda d: f"{d['id']}: {d['state']}")


def _text_argument(value: str, what: str) -> str:
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


@cli.group()
def linear() -> None:
    """Talk to Linear through the running service (inside a turn: $WAKELINE_API_URL, $WAKELINE_TOKEN)."""


@linear.command("graphql")
@click.argument("query")
@click.option("--variables", metavar="JSON", help="Variables as a JSON object (or @FILE).")
@click.option("--operation-name", metavar="NAME", help="The operation to run when QUERY holds several.")
@click.option("--confirm", multiple=True, metavar="ID",
              help="An id a destructive mutation targets; repeat to list every target exactly.")
@pass_ctx
def linear_graphql(ctx: Context, query: str, variables: str | None, operation_name: str | None,
                   confirm: tuple[str, ...]) -> None:
    """Run one GraphQL operation against Linear; prints Linear's JSON.

    QUERY is the document, `-` to read it from stdin, or `@FILE`. Mutations need the
    operator or a worker lane; a destructive one (…Delete, …Archive, …Revoke, …) needs
    --confirm for each id it targets, and nothing else.
    """
    payload: dict[str, Any] = {"query": _text_argument(query, "query")}
    if variables is not None:
        try:
            parsed = json.loads(_text_argument(variables, "variables"))
        except ValueError:
            raise click.UsageError("--variables must be JSON") from None
        if not isinstance(parsed, dict):
            raise click.UsageError("--variables must be a JSON object")
        payload["variables"] = parsed
    if operation_name:
        payload["operationName"] = operation_name
    if confirm:
        payload["confirm"] = list(confirm)
    data = ctx.call("POST", "/v1/linear/graphql", json=payload,
                             timeout=LINEAR_TIMEOUT_SECONDS)
    click.echo(json.dumps(data, indent=2, ensure_ascii=False))


@linear.command("comment")
@click.argument("issue_id")
@click.argument("body")
@json_option
@pass_ctx
def linear_comment(ctx: Context, issue_id: str, body: str, as_json: bool) -> None:
    """Comment on an issue (BODY may be `-` for stdin or `@FILE`); waits until Linear confirms."""
    data = ctx.call("POST", "/v1/linear/comment",
                             json={"issueId": issue_id, "body": _text_argument(body, "body")},
                             timeout=LINEAR_TIMEOUT_SECONDS)
    emit(data, as_json, lambda d: f"comment {d['id']} on {d['issueId']}: {d['state']}")


@linear.command("connect")
@json_option
@pass_ctx
def linear_connect(ctx: Context, as_json: bool) -> None:
    """Check the Linear credential once (`viewer`) and record the account it belongs to."""
    data = ctx.call("POST", "/v1/linear/connect", timeout=LINEAR_TIMEOUT_SECONDS)
    emit(data, as_json, lambda d: f"connected to Linear as {d['name'] or '-'} ({d['id']}) "
                                  f"with a {d['kind'].replace('_', ' ')}")


INSTALL_WAIT_SECONDS = 600.0  # Linear's redirect must come within the install's ten minutes


def _installed_text(data: dict[str, Any]) -> str:
    installed = data["installed"]
    viewer, org = installed["viewer"], installed["organization"]
    where = f" in {org['name'] or '-'} ({org['id']})" if org.get("id") else ""
    return (f"connected to Linear as {viewer['name'] or '-'} ({viewer['id']}){where}; "
            f"the token renews itself (this one is valid until {installed['expiresAt']})")


@linear.command("install")
@click.option("--code", metavar="CODE",
              help="Complete the install with the code from the redirect's address bar (a "
                   "browser on another machine).")
@click.option("--redirect-uri", metavar="URI",
              help="The callback Linear redirects to (default: this service's "
                   "http://127.0.0.1:<operator_port>/oauth/callback); with --code, the one used.")
@json_option
@pass_ctx
def linear_install(ctx: Context, code: str | None, redirect_uri: str | None, as_json: bool) -> None:
    """Install the Linear app as itself (linear.client_id and the client secret).

    Prints the URL a workspace admin opens, then waits up to ten minutes for Linear's
    redirect to reach the running service. With --code, completes at once. With
    `grant = "client_credentials"`, fetches the app's token and needs no browser.
    """
    payload: dict[str, Any] = {}
    if code is not None:
        payload["code"] = code
    if redirect_uri is not None:
        payload["redirectUri"] = redirect_uri
    data = ctx.call("POST", "/v1/linear/install", json=payload, timeout=LINEAR_TIMEOUT_SECONDS)
    if data["status"] == "connected":
        emit(data, as_json, _installed_text)
        return
    click.echo(json.dumps(data) if as_json else
               "Open this URL in a browser, signed in to Linear as a workspace admin, and approve "
               f"the app:\n\n  {data['authorizeUrl']}\n\nWaiting for Linear's redirect to "
               f"{data['redirectUri']} (until {data['expiresAt']}). If the browser runs on another "
               "machine, copy the code= value from the address bar it lands on and run:\n"
               "  wakeline linear install --code CODE", err=not as_json)
    deadline = time.monotonic() + INSTALL_WAIT_SECONDS
    while time.monotonic() < deadline:
        outcome = ctx.call("GET", f"/v1/linear/install/{data['state']}", params={"wait": 20},
                           timeout=JOURNAL_WAIT_TIMEOUT_SECONDS)
        if outcome["status"] == "connected":
            emit(outcome, as_json, _installed_text)
            return
        if outcome["status"] != "pending":
            fail(f"not installed: {outcome.get('error') or outcome['status']}"
                 "\n  next: run `wakeline linear install` again")
    fail("not installed: no redirect from Linear within ten minutes"
         "\n  next: run `wakeline linear install` again (or use --code)")


# --- inside a turn: wakeline agent ... ------------------------------------------------------------


@cli.group()
def agent() -> None:
    """Show the running turn's progress in its Linear agent session ($WAKELINE_TOKEN)."""


def _progress(ctx: Context, event: dict[str, Any], as_json: bool) -> None:
    data = ctx.call("POST", "/v1/turn/progress", json=event)
    if as_json:
        click.echo(json.dumps(data))


@agent.command("thought")
@click.argument("text")
@json_option
@pass_ctx
def agent_thought(ctx: Context, text: str, as_json: bool) -> None:
    """Share a thought (TEXT may be `-` for stdin or `@FILE`)."""
    _progress(ctx, {"type": "thought", "body": _text_argument(text, "thought")}, as_json)


@agent.command("action")
@click.argument("action")
@click.argument("parameter")
@click.option("--result", metavar="TEXT", help="The action's result: without it, the action is "
                                               "shown as under way.")
@json_option
@pass_ctx
def agent_action(ctx: Context, action: str, parameter: str, result: str | None, as_json: bool) -> None:
    """Show an action (a tool and its main argument), under way or with its result."""
    event: dict[str, Any] = {"type": "action", "action": action, "parameter": parameter}
    if result is not None:
        event["result"] = _text_argument(result, "result")
    _progress(ctx, event, as_json)


@agent.command("plan")
@click.argument("steps", nargs=-1, required=True)
@click.option("--done", type=click.IntRange(0), default=0, show_default=True,
              help="How many of the first steps are completed.")
@click.option("--active", type=click.IntRange(1), default=None,
              help="The step (1-based) in progress.")
@json_option
@pass_ctx
def agent_plan(ctx: Context, steps: tuple[str, ...], done: int, active: int | None,
               as_json: bool) -> None:
    """Set the session's plan: every STEP, the first --done completed, --active in progress,
    the rest pending."""
    _progress(ctx, {"type": "plan", "steps": [
        {"content": step, "status": "completed" if n <= done else
         "inProgress" if n == active else "pending"} for n, step in enumerate(steps, 1)]},
        as_json)


@agent.command("link")
@click.argument("label")
@click.argument("url")
@json_option
@pass_ctx
def agent_link(ctx: Context, label: str, url: str, as_json: bool) -> None:
    """Link the session to a URL (a pull request, a preview, a dashboard)."""
    _progress(ctx, {"type": "link", "label": label, "url": url}, as_json)


@agent.command("session")
@click.argument("session_id")
@json_option
@pass_ctx
def agent_session(ctx: Context, session_id: str, as_json: bool) -> None:
    """Remember your own session id: the conversation's next turn gets it as
    $WAKELINE_AGENT_SESSION (until a reset or a closed issue)."""
    _progress(ctx, {"type": "session", "id": session_id}, as_json)


@agent.command("options")
@click.argument("options", nargs=-1, required=True, metavar="LABEL=VALUE...")
@json_option
@pass_ctx
def agent_options(ctx: Context, options: tuple[str, ...], as_json: bool) -> None:
    """Offer these choices with the turn's question (a `select` in Linear)."""
    pairs = []
    for option in options:
        label, sep, value = option.partition("=")
        if not sep or not label or not value:
            raise click.UsageError(f"{option!r}: options are LABEL=VALUE")
        pairs.append({"label": label, "value": value})
    _progress(ctx, {"type": "options", "options": pairs}, as_json)


def _json_or_text(resp: requests.Response) -> Any:
    try:
        return resp.json()
    except ValueError:
        return resp.text.strip()


def _replay_lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    lines = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            fail(f"{path}:{number}: not JSON", EXIT_USAGE)
        if not isinstance(item, dict):
            fail(f"{path}:{number}: not a JSON object", EXIT_USAGE)
        lines.append((number, item))
    return lines


@cli.command()
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--url", help="Webhook URL (default: the configured ingress).")
@json_option
@pass_ctx
def replay(ctx: Context, file: Path, url: str | None, as_json: bool) -> None:
    """Sign and send recorded deliveries with fresh timestamps.

    Each line is a webhook body, or {"body": {...}, "delivery": ID, "event": TYPE}.
    A line without a delivery id gets a new one.
    """
    from wakeline.providers.linear.signature import sign
    from wakeline.secrets import WEBHOOK_SECRET_ENV, load_secrets

    config = ctx.config()
    secret = load_secrets(config, dict(os.environ)).webhook_secret
    if secret is None:
        fail(f"no webhook secret (set ${WEBHOOK_SECRET_ENV} or run `wakeline init`)", EXIT_USAGE)
    host = config.server.webhook_host
    url = url or f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:" \
                 f"{config.server.webhook_port}/webhooks/linear"
    session = http_session(url)  # the service on loopback: never through a proxy
    failures = 0
    for number, item in _replay_lines(file):
        body = item["body"] if isinstance(item.get("body"), dict) else item
        body = {**body, "webhookTimestamp": int(time.time() * 1000)}
        raw = json.dumps(body, separators=(",", ":")).encode()
        delivery = str(item.get("delivery") or uuid.uuid4())
        headers = {
            "Content-Type": "application/json",
            "Linear-Signature": sign(secret.get_secret_value(), raw),
            "Linear-Delivery": delivery,
            "Linear-Event": str(item.get("event") or body.get("type", "")),
        }
        try:
            resp = session.post(url, data=raw, headers=headers, timeout=30)
        except requests.RequestException:
            fail(f"cannot reach {url}", EXIT_UNREACHABLE)
        if as_json:
            click.echo(json.dumps({"line": number, "delivery": delivery, "status": resp.status_code,
                                   "answer": _json_or_text(resp)}, ensure_ascii=False))
        else:
            click.echo(f"line {number}: {delivery} -> {resp.status_code} {resp.text.strip()}")
        failures += resp.status_code != 200
    if failures:
        fail(f"{failures} deliveries refused", EXIT_FAILED)


def _conversation_line(c: dict[str, Any]) -> str:
    last = c.get("lastTurn") or {}
    state = f"{c['state']} ({c['outcome']})" if c.get("outcome") else c["state"]
    return (f"{c['id']}  {coloured(state, 21)} pending {c['pending']:<3} claimed {c['claimed']:<3} "
            f"last {last.get('result', '-'):<11} {ago(c.get('updatedAt')):>9}  "
            f"{c['title'] or c['subject']['key']}")


def _conversation_text(c: dict[str, Any]) -> str:
    lines = [_conversation_line(c), f"route: {c['route'] or '-'}", f"session: {c['session'] or '-'}",
             f"agent session (Linear): {c.get('agentSession') or '-'}",
             f"runner session (the agent CLI's own, resumed next turn): {c.get('runnerSession') or '-'}"]
    own = c.get("ownership") or {}
    if own:
        line = f"ownership: {own['state']}" + (f", project {own['projectId']}" if own.get("projectId") else "")
        if own.get("lastError"):
            line += f" (attempt {own['attempts']} failed: {own['lastError']}; next {own['nextAttemptAt']})"
        lines.append(line)
    if c.get("terminalEvidence"):
        ev = c["terminalEvidence"]
        lines.append(f"terminal: {c['outcome']} (state {ev['stateId'] or '-'}, done state "
                     f"{ev['doneStateId'] or 'not configured'})")
    if c.get("workspace"):
        ws = c["workspace"]
        lines.append(f"workspace: branch {ws['branch']}"
                     + (", cleanup pending" if ws["cleanupPending"] else "")
                     + (f", kept: {ws['kept']}" if ws.get("kept") else ""))
    plan = c.get("plan") or {}
    if plan.get("phase", "none") != "none" or plan.get("rev"):
        line = f"plan: {plan['phase']}, revision {plan['rev']}"
        if plan.get("approvedBy"):
            line += (f", approved by {plan['approvedBy']}"
                     + (f" (revision {plan['approvedRev']})" if plan.get("approvedRev") else
                        " (unplanned)"))
        if plan.get("lease"):
            line += f", execution lease since {plan['lease']['since']}"
        lines.append(line)
    if c.get("control"):
        ctl = c["control"]
        state = "archived" + (" and locked" if ctl.get("locked") else "") if ctl["archived"] \
            else "open"
        lines.append(f"control: {ctl['provider']} thread {ctl['threadId']} \"{ctl['title']}\" "
                     f"({state})")
    if c.get("turn"):
        t = c["turn"]
        lines.append(f"turn: {t['id']} {t['state']} attempt {t['attempt']}"
                     + (f" ({t['lastError']})" if t.get("lastError") else ""))
    lines.append("fifo:")
    lines += [f"  {f['seq']:>6} {f['state']:<9} {f['completion'] or '':<11} {f['headline']}"
              for f in c.get("fifo", [])]
    lines.append("turns:")
    lines += [f"  {t['turnId']} {t['result']:<11} exit {t['exitCode']} deliveries {t['deliveries']}"
              for t in c.get("turns", [])]
    return "\n".join(lines)


@cli.group(invoke_without_command=True)
@json_option
@click.pass_context
def conversations(click_ctx: click.Context, as_json: bool) -> None:
    """List conversations, show one, or stop, reset, retry or abandon its turn."""
    if click_ctx.invoked_subcommand is None:
        data = click_ctx.obj.call("GET", "/v1/conversations")
        emit(data, as_json, lambda d: "\n".join(_conversation_line(c) for c in d["conversations"])
             or "no conversations")


@conversations.command("list")
@click.option("--state", type=click.Choice(["idle", "running", "stalled", "waiting_ownership",
                                            "terminal"]))
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@json_option
@pass_ctx
def conversations_list(ctx: Context, state: str | None, limit: int, as_json: bool) -> None:
    """List conversations, most recently updated first."""
    data = ctx.call("GET", "/v1/conversations", params={"state": state, "limit": limit})
    emit(data, as_json, lambda d: "\n".join(_conversation_line(c) for c in d["conversations"])
         or "no conversations")


@conversations.command("show")
@click.argument("conversation_id")
@json_option
@pass_ctx
def conversations_show(ctx: Context, conversation_id: str, as_json: bool) -> None:
    """Show one conversation with its FIFO and last turns."""
    emit(ctx.call("GET", f"/v1/conversations/{conversation_id}"), as_json, _conversation_text)


def _command(name: str, help_text: str) -> None:
    @conversations.command(name, help=help_text)
    @click.argument("conversation_id")
    @json_option
    @pass_ctx
    def run(ctx: Context, conversation_id: str, as_json: bool) -> None:
        data = ctx.call("POST", f"/v1/conversations/{conversation_id}/{name}")
        emit(data, as_json, lambda d: f"{name}: done for {conversation_id}")


_command("stop", "Stop the running turn (its deliveries complete as stopped).")
_command("reset", "Reset the context: a new session; earlier work completes as reset.")
_command("retry", "Run a stalled turn again.")
_command("abandon", "Give up on a stalled turn and move on.")


def _inbox_text(data: dict[str, Any], *, before: bool) -> str:
    lines = [f"inbox: {data['unreadCount']} unread, ack cursor {data['ackCursor']}, "
             f"oldest {data['oldestCursor'] if data['oldestCursor'] is not None else '-'}"]
    for e in data["events"]:
        marker = "*" if e["unread"] else " "
        cut = " (truncated)" if e["truncated"] else ""
        lines.append(f"{e['cursor']:>8} {ago(e['receivedAt']):>9} {marker} {e['headline']}{cut}")
        if "event" in e:
            event = json.dumps(e["event"], indent=2, ensure_ascii=False)
            lines += ["           " + line for line in event.splitlines()]
    if not data["events"]:
        lines.append("no events")
    elif data["hasMore"]:
        lines.append(f"more: wakeline inbox --before {data['events'][0]['cursor']}" if before
                     else f"more: wakeline inbox --after {data['events'][-1]['cursor']}")
    return "\n".join(lines)


@cli.group(invoke_without_command=True)
@click.option("--after", type=click.IntRange(min=0), metavar="CURSOR",
              help="Read forward from just after CURSOR (default: the ack boundary).")
@click.option("--before", type=click.IntRange(min=0), metavar="CURSOR",
              help="Read the history just before CURSOR, read or not.")
@click.option("--limit", type=click.IntRange(1, 100), help="At most this many events (default 20).")
@click.option("--headlines", is_flag=True, help="One line per event, without the payload.")
@json_option
@click.pass_context
def inbox(click_ctx: click.Context, after: int | None, before: int | None, limit: int | None,
          headlines: bool, as_json: bool) -> None:
    """Read the Linear inbox (reads never consume), or acknowledge what was read.

    `*` marks an unread event. Reading marks the events shown; `wakeline inbox ack
    CURSOR` then moves the read boundary to CURSOR.
    """
    if click_ctx.invoked_subcommand is not None:
        return
    if after is not None and before is not None:
        raise click.UsageError("--after and --before cannot be combined")
    params = {"after": after, "before": before, "limit": limit,
              "view": "headlines" if headlines else None}
    data = click_ctx.obj.call("GET", "/v1/inbox", params=params)
    emit(data, as_json, lambda d: _inbox_text(d, before=before is not None))


@inbox.command("ack")
@click.argument("cursor", type=click.IntRange(min=0))
@json_option
@pass_ctx
def inbox_ack(ctx: Context, cursor: int, as_json: bool) -> None:
    """Move the read boundary to CURSOR: an unread event a read has shown."""
    data = ctx.call("POST", "/v1/inbox/ack", json={"cursor": cursor})
    emit(data, as_json, lambda d: f"ack cursor: {d['ackCursor']}, {d['unreadCount']} unread")


def _journal_line(entry: dict[str, Any]) -> str:
    when = entry["at"].replace("T", " ")[:19]
    keys = f"  {' '.join(entry['issueKeys'])}" if entry["issueKeys"] else ""
    stage = f" [{entry['stage']}]" if entry.get("stage") else ""
    first, *rest = (entry["text"] or "").splitlines() or [""]
    head = f"{entry['seq']:>6} {when}  {entry['kind']:<14} {entry['from']} → {entry['to']}{keys}{stage}"
    return "\n".join([f"{head}  {first}", *(f"{'':>28}{line}" for line in rest)])


def _journal_text(data: dict[str, Any]) -> str:
    lines = [_journal_line(e) for e in data["entries"]]
    if not lines:
        lines.append("no entries" + (f" (recording since {data['recordingSince']})"
                                     if data.get("recordingSince") else ""))
    return "\n".join(lines)


@cli.command()
@click.option("--older", type=click.IntRange(min=0), metavar="SEQ",
              help="The entries just before SEQ.")
@click.option("--newer", type=click.IntRange(min=0), metavar="SEQ",
              help="The entries just after SEQ.")
@click.option("--limit", type=click.IntRange(1, 500), default=50, show_default=True,
              help="At most this many entries.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new entries until Ctrl-C.")
@json_option
@pass_ctx
def journal(ctx: Context, older: int | None, newer: int | None, limit: int, follow: bool,
            as_json: bool) -> None:
    """Read the owner's journal: what arrived, what agents were told and answered, what
    wakeline wrote to Linear; oldest first. Needs the operator token.

    With --json each page is the API's JSON (with --follow, one entry per line).
    """
    if older is not None and newer is not None:
        raise click.UsageError("--older and --newer cannot be combined")
    if follow and older is not None:
        raise click.UsageError("--follow reads forward: use --newer, not --older")
    params = {"older": older, "newer": newer, "limit": limit}
    data = ctx.call("GET", "/v1/journal", params=params)
    if not follow:
        emit(data, as_json, _journal_text)
        return

    def show(entries: list[dict[str, Any]]) -> None:
        for entry in entries:
            click.echo(json.dumps(entry, ensure_ascii=False) if as_json else _journal_line(entry))

    show(data["entries"])
    cursor = data["entries"][-1]["seq"] if data["entries"] else (newer or data.get("newest") or 0)
    try:
        while True:
            page = ctx.call("GET", "/v1/journal", params={"newer": cursor, "wait": 20, "limit": 500},
                            timeout=JOURNAL_WAIT_TIMEOUT_SECONDS)
            show(page["entries"])
            if page["entries"]:
                cursor = page["entries"][-1]["seq"]
    except KeyboardInterrupt:
        pass


def _demo_text(summary: Any) -> str:
    lines = ["", "What Linear sent (each signed, answered at once):"]
    lines += [f"  {label:<36} {outcome}" for label, outcome in summary.deliveries]
    lines += ["", "What Linear would have received from wakeline, in order:"]
    for number, write in enumerate(summary.writes, 1):
        what = f"{write['type']} activity" if write.get("type") else write["operation"]
        body = " ".join(str(write.get("body") or "").split())
        lines.append(f"  {number:>2}. {what:<22} {body[:90]}{'…' if len(body) > 90 else ''}")
    lines += ["", "The Linear inbox (every data-change event, kept for the agent to read):"]
    lines += [f"  {headline}" for headline in summary.inbox] or ["  (empty)"]
    lines += ["", "Conversations:"]
    lines += [f"  {c['id']}  {c['state']}{' (' + c['outcome'] + ')' if c['outcome'] else ''}  {c['title']}"
              for c in summary.conversations]
    lines += ["", "The journal (what the owner sees with `wakeline journal`):"]
    lines += [_journal_line(entry) for entry in summary.journal]
    lines += ["", f"Done in {summary.seconds:.1f} s."]
    return "\n".join(lines)


@cli.command()
@click.option("--keep", is_flag=True, help="Keep the demo's state dir and say how to look at it.")
@json_option
def demo(keep: bool, as_json: bool) -> None:
    """Run a whole wakeline offline on a bundled session, then show what happened.

    No network and no Linear account: a stand-in for Linear's API runs on loopback and
    the bundled demo agent answers. Takes about ten seconds.
    """
    from wakeline.demo import run_demo

    tty = sys.stderr.isatty() and not as_json

    def progress(text: str) -> None:
        if tty:
            click.echo(f"\r\033[K{text[:100]}", nl=False, err=True)

    if not as_json:
        click.echo("wakeline demo: a whole wakeline, offline, on a bundled Linear session")
    try:
        summary = run_demo(keep=keep, progress=progress)
    except (TimeoutError, OSError) as exc:
        fail(f"the demo did not finish: {exc}")
    if tty:
        click.echo("\r\033[K", nl=False, err=True)
    emit(summary.to_json(), as_json, lambda _: _demo_text(summary))
    if summary.kept and not as_json:
        config = summary.kept / "wakeline.toml"
        click.echo(f"\nKept in {summary.kept}. To look around, start it again and ask it:\n"
                   f"  wakeline --config {config} serve &\n"
                   f"  wakeline --config {config} conversations\n"
                   f"  wakeline --config {config} journal\n"
                   f"  wakeline --config {config} inbox --headlines")


@cli.command()
@click.argument("state", required=False, type=click.Choice(["on", "off"]))
@json_option
@pass_ctx
def follow(ctx: Context, state: str | None, as_json: bool) -> None:
    """Show the follow switch, or turn it on or off (persisted; wins over the config)."""
    if state is None:
        data = ctx.call("GET", "/v1/following")
    else:
        data = ctx.call("PUT", "/v1/following", json={"following": state == "on"})
    emit(data, as_json, lambda d: f"following: {'on' if d['following'] else 'off'}")


# `wakeline matrix ...` and `wakeline approvals ...` (Matrix routes) live in their own module.
from wakeline import cli_matrix  # noqa: E402,F401  (registers its commands on `cli`)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="wakeline")

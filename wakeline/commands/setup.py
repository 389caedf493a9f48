"""Setting up and running: `init`, `serve`, `doctor`, `replay`, `demo`.

Only `doctor` may talk to a running service; the rest work without one.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import click
import requests

from wakeline.commands.base import (
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    Context,
    cli,
    emit,
    fail,
    json_option,
    json_or_text,
    pass_ctx,
)
from wakeline.commands.client import ApiError, NoToken, OperatorClient, Unreachable
from wakeline.service.net import http_session
from wakeline.commands.operate import journal_line
from wakeline.errors import ConfigError


@cli.command()
@json_option
@pass_ctx
def init(ctx: Context, as_json: bool) -> None:
    """Write a commented config, the webhook secret and the operator token.

    Never overwrites: what exists is kept. Then edit the config's routes and run
    `wakeline doctor`, and `wakeline serve`.
    """
    from wakeline.commands.scaffold import init_project

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
        from wakeline.service.checks import local_checks

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
                                   "answer": json_or_text(resp)}, ensure_ascii=False))
        else:
            click.echo(f"line {number}: {delivery} -> {resp.status_code} {resp.text.strip()}")
        failures += resp.status_code != 200
    if failures:
        fail(f"{failures} deliveries refused", EXIT_FAILED)



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
    lines += [journal_line(entry) for entry in summary.journal]
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

"""`wakeline matrix read|send` (inside a Matrix route's turn) and `wakeline approvals`.

Registered on the `wakeline` group by `wakeline.cli`. Inside a turn the commands find the
service and the turn's token in `$WAKELINE_API_URL` and `$WAKELINE_TOKEN`; an operator's
run uses the config and the operator token. No command takes a room: a turn's route names it.
"""

from __future__ import annotations

from typing import Any

import click

from wakeline.commands.base import (
    Context,
    ago,
    cli,
    coloured,
    emit,
    json_option,
    pass_ctx,
    text_argument,
)

APPROVE_TIMEOUT_SECONDS = 30.0  # the service waits up to 10 s for the send's event id


@cli.group()
def matrix() -> None:
    """Read the Matrix room of this turn's route, or propose a reply ($WAKELINE_TOKEN)."""


def _read_text(data: dict[str, Any]) -> str:
    lines = [f"{data['route']}: {data['room']}"]
    for m in data["messages"]:
        who = f"{m['sender']}{' (owner)' if m.get('owner') else ''}"
        when = (m.get("sentAt") or "")[:19].replace("T", " ")
        if m.get("undecryptable"):
            lines.append(f"{when}  {who}: (encrypted; no keys for it yet)")
            continue
        body = m["body"] + (" …(truncated)" if m.get("truncated") else "")
        first, *rest = body.splitlines() or [""]
        lines.append(f"{when}  {who}: {first}")
        lines += [f"{'':>21}{line}" for line in rest]
    if not data["messages"]:
        lines.append("no text yet")
    return "\n".join(lines)


@matrix.command("read")
@click.option("--limit", type=click.IntRange(1, 100), help="At most this many events (default 20).")
@click.option("--route", metavar="NAME",
              help="The route to read (the operator only; a turn reads its own).")
@json_option
@pass_ctx
def matrix_read(ctx: Context, limit: int | None, route: str | None, as_json: bool) -> None:
    """Show the recent text of the route's room, oldest first, after rechecking the route."""
    data = ctx.call("GET", "/v1/matrix/read", params={"limit": limit, "route": route})
    emit(data, as_json, _read_text)


@matrix.command("send")
@click.argument("text")
@json_option
@pass_ctx
def matrix_send(ctx: Context, text: str, as_json: bool) -> None:
    """Propose TEXT as a reply in the route's room (`-` reads stdin, `@FILE` a file).

    Nothing is sent: a human approves (or denies) exactly this text first.
    """
    data = ctx.call("POST", "/v1/matrix/send", json={"text": text_argument(text, "text")})
    emit(data, as_json, lambda d: f"approval {d['approval']['id']} is pending: a human must "
                                  "approve this text before it is sent")


def _approval_line(a: dict[str, Any]) -> str:
    body = " ".join(a["body"].split())
    tail = f"  event {a['eventId']}" if a.get("eventId") else (
        f"  ({a['error']})" if a.get("error") else "")
    return (f"{a['id']}  {coloured(a['status'], 9)} {ago(a['createdAt']):>9}  {a['route']} "
            f"→ {a['room']}{tail}\n    {body[:200]}{'…' if len(body) > 200 else ''}")


def _approvals_text(data: dict[str, Any]) -> str:
    return "\n".join(_approval_line(a) for a in data["approvals"]) or "no approvals"


@cli.group(invoke_without_command=True)
@json_option
@click.pass_context
def approvals(click_ctx: click.Context, as_json: bool) -> None:
    """List the Matrix sends that wait for a human, or approve or deny one (operator)."""
    if click_ctx.invoked_subcommand is None:
        emit(click_ctx.obj.call("GET", "/v1/approvals"), as_json, _approvals_text)


@approvals.command("list")
@click.option("--status", type=click.Choice(["pending", "approved", "denied", "sent", "expired",
                                             "failed"]))
@click.option("--limit", type=click.IntRange(1, 1000), default=100, show_default=True)
@json_option
@pass_ctx
def approvals_list(ctx: Context, status: str | None, limit: int, as_json: bool) -> None:
    """List approvals: pending first, then newest first, each with its full text."""
    data = ctx.call("GET", "/v1/approvals", params={"status": status, "limit": limit})
    emit(data, as_json, _approvals_text)


def _decided(data: dict[str, Any]) -> str:
    a = data["approval"]
    if a["status"] == "sent":
        return f"{a['id']}: sent to {a['room']} as {a['eventId']}"
    if a["status"] == "approved":
        return f"{a['id']}: approved; sending to {a['room']} (see `wakeline approvals list`)"
    if a["status"] == "failed":
        return f"{a['id']}: approved, but not sent: {a['error']}"
    return f"{a['id']}: {a['status']}"


@approvals.command("approve")
@click.argument("approval_id")
@json_option
@pass_ctx
def approvals_approve(ctx: Context, approval_id: str, as_json: bool) -> None:
    """Approve a pending send: it goes to its room once, exactly as shown by `list`."""
    data = ctx.call("POST", f"/v1/approvals/{approval_id}/approve", json={},
                    timeout=APPROVE_TIMEOUT_SECONDS)
    emit(data, as_json, _decided)


@approvals.command("deny")
@click.argument("approval_id")
@json_option
@pass_ctx
def approvals_deny(ctx: Context, approval_id: str, as_json: bool) -> None:
    """Deny a pending send: it is never sent."""
    data = ctx.call("POST", f"/v1/approvals/{approval_id}/deny", json={})
    emit(data, as_json, _decided)

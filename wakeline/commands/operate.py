"""Operating a running service: `status`, `follow`, `conversations`, `inbox`, `journal`,
`effects`.
"""

from __future__ import annotations

import json
from typing import Any

import click

from wakeline.commands.base import (
    LONG_POLL_TIMEOUT_SECONDS,
    Context,
    ago,
    cli,
    coloured,
    emit,
    json_option,
    pass_ctx,
)


def status_text(data: dict[str, Any]) -> str:
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
    emit(ctx.call("GET", "/v1/status"), as_json, status_text)


# --- doctor, effects and Linear ------------------------------------------------------------------


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


def _conversation_line(c: dict[str, Any]) -> str:
    last = c.get("lastTurn") or {}
    state = f"{c['state']} ({c['outcome']})" if c.get("outcome") else c["state"]
    return (f"{c['id']}  {coloured(state, 21)} pending {c['pending']:<3} claimed {c['claimed']:<3} "
            f"last {last.get('result', '-'):<11} {ago(c.get('updatedAt')):>9}  "
            f"{c['title'] or c['subject']['key']}")


def conversation_text(c: dict[str, Any]) -> str:
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
    if c.get("repo"):
        lines.append(f"repo: {c['repo']} (chosen for the issue; a reset clears it)")
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
    emit(ctx.call("GET", f"/v1/conversations/{conversation_id}"), as_json, conversation_text)


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


def journal_line(entry: dict[str, Any]) -> str:
    when = entry["at"].replace("T", " ")[:19]
    keys = f"  {' '.join(entry['issueKeys'])}" if entry["issueKeys"] else ""
    stage = f" [{entry['stage']}]" if entry.get("stage") else ""
    first, *rest = (entry["text"] or "").splitlines() or [""]
    head = f"{entry['seq']:>6} {when}  {entry['kind']:<14} {entry['from']} → {entry['to']}{keys}{stage}"
    return "\n".join([f"{head}  {first}", *(f"{'':>28}{line}" for line in rest)])


def _journal_text(data: dict[str, Any]) -> str:
    lines = [journal_line(e) for e in data["entries"]]
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
            click.echo(json.dumps(entry, ensure_ascii=False) if as_json else journal_line(entry))

    show(data["entries"])
    cursor = data["entries"][-1]["seq"] if data["entries"] else (newer or data.get("newest") or 0)
    try:
        while True:
            page = ctx.call("GET", "/v1/journal", params={"newer": cursor, "wait": 20, "limit": 500},
                            timeout=LONG_POLL_TIMEOUT_SECONDS)
            show(page["entries"])
            if page["entries"]:
                cursor = page["entries"][-1]["seq"]
    except KeyboardInterrupt:
        pass



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

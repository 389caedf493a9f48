"""Inside a turn: `wakeline agent ...` shows the turn's progress in its Linear agent session
(with $WAKELINE_API_URL and $WAKELINE_TOKEN).
"""

from __future__ import annotations

import json
from typing import Any

import click

from wakeline.commands.base import (
    Context,
    cli,
    json_option,
    pass_ctx,
    text_argument,
)


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
    _progress(ctx, {"type": "thought", "body": text_argument(text, "thought")}, as_json)


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
        event["result"] = text_argument(result, "result")
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

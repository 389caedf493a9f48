"""`wakeline linear ...`: Linear through the running service, as the operator or, inside a
turn, with the turn's token ($WAKELINE_API_URL, $WAKELINE_TOKEN).
"""

from __future__ import annotations

import json
import time
from typing import Any

import click

from wakeline.commands.base import (
    LONG_POLL_TIMEOUT_SECONDS,
    Context,
    cli,
    emit,
    fail,
    json_option,
    pass_ctx,
    text_argument,
)

LINEAR_TIMEOUT_SECONDS = 60.0  # the service waits up to ~40 s for Linear; answer before giving up



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
    payload: dict[str, Any] = {"query": text_argument(query, "query")}
    if variables is not None:
        try:
            parsed = json.loads(text_argument(variables, "variables"))
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
                             json={"issueId": issue_id, "body": text_argument(body, "body")},
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
                           timeout=LONG_POLL_TIMEOUT_SECONDS)
        if outcome["status"] == "connected":
            emit(outcome, as_json, _installed_text)
            return
        if outcome["status"] != "pending":
            fail(f"not installed: {outcome.get('error') or outcome['status']}"
                 "\n  next: run `wakeline linear install` again")
    fail("not installed: no redirect from Linear within ten minutes"
         "\n  next: run `wakeline linear install` again (or use --code)")


# --- inside a turn: wakeline agent ... ------------------------------------------------------------

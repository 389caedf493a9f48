"""Every error wakeline raises on purpose, each with a stable code.

The codes are part of the external contract (CONTRACT.md): the HTTP edge maps
them to statuses in `wakeline.http.errors`, the CLI to exit codes. Nothing
below this module knows about HTTP.
"""

from __future__ import annotations

from typing import Any


class WakelineError(Exception):
    """Base class: a refusal or failure with a stable machine-readable code."""

    code = "internal"

    def __init__(self, detail: str = "", **extra: Any) -> None:
        super().__init__(detail or self.code)
        self.detail = detail
        self.extra = extra

    def body(self) -> dict[str, Any]:
        """The JSON body that describes this error to a caller."""
        out: dict[str, Any] = {"error": self.code}
        if self.detail:
            out["detail"] = self.detail
        out.update(self.extra)
        return out


class ConfigError(WakelineError):
    """The configuration cannot be loaded; `key` is the dotted name at fault."""

    code = "config_invalid"

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"{key}: {reason}")
        self.key = key
        self.reason = reason


# --- ingress rejections, in the order the ingress checks them ---------------------------


class TooLarge(WakelineError):
    """The body is larger than `server.max_body_bytes`."""

    code = "too_large"


class SignatureInvalid(WakelineError):
    """The `Linear-Signature` header is missing or does not match the body."""

    code = "signature_invalid"


class Malformed(WakelineError):
    """The delivery cannot be parsed: no delivery id, not a JSON object, fields missing."""

    code = "malformed"


class TimestampStale(WakelineError):
    """The signed `webhookTimestamp` is missing or outside the freshness window."""

    code = "timestamp_stale"


class OrganizationRefused(WakelineError):
    """The delivery belongs to another Linear organization than the configured one."""

    code = "organization_refused"


class Unavailable(WakelineError):
    """The store cannot commit right now; the caller should retry later."""

    code = "unavailable"


# --- operator API ----------------------------------------------------------------------


class Unauthorized(WakelineError):
    """No bearer token, or one that is unknown or expired."""

    code = "unauthorized"


class LaneRefused(WakelineError):
    """The caller's lane may not use this operation."""

    code = "lane_refused"


class ActionRefused(WakelineError):
    """A state-changing request carried the control page's cookie but not the marks of the
    page itself (`Sec-Fetch-Site: same-origin` or the page's `Origin`, and
    `X-Wakeline-Action: 1`): another site may have sent it. Nothing changed."""

    code = "action_refused"


class NotFound(WakelineError):
    """The named resource does not exist."""

    code = "not_found"


class BadRequest(WakelineError):
    """The request's parameters or body are not acceptable."""

    code = "bad_request"


class NotShown(WakelineError):
    """An inbox ack named a cursor that no read has shown yet."""

    code = "not_shown"


class Conflict(WakelineError):
    """The operation does not apply to the resource in its current state."""

    code = "conflict"


# --- Linear ----------------------------------------------------------------------------


class InvalidQuery(WakelineError):
    """The GraphQL document does not parse, or holds other than one operation."""

    code = "invalid_query"


class ConfirmMismatch(WakelineError):
    """A destructive mutation's `confirm` does not list exactly its targets."""

    code = "confirm_mismatch"


class TargetUnnameable(WakelineError):
    """A destructive mutation's targets cannot be resolved to literal ids."""

    code = "target_unnameable"


class BudgetExhausted(WakelineError):
    """The request budget (local or Linear's) refuses before dispatch."""

    code = "budget_exhausted"


class ProviderRejected(WakelineError):
    """Linear definitely refused the request (GraphQL errors, 4xx, rate limit)."""

    code = "provider_rejected"


class PossiblyDispatched(WakelineError):
    """A network error or 5xx: the request may have reached Linear. Never retried."""

    code = "possibly_dispatched"


class RequiresConnectedLinear(WakelineError):
    """No Linear credential: the local backend cannot do this."""

    code = "requires_connected_linear"


class LinearAuthUnavailable(RequiresConnectedLinear):
    """A credential is configured but no token works now (not installed, refresh refused,
    the token endpoint unreachable): Linear ran nothing, and writes wait for a token."""


# --- a running turn's progress ------------------------------------------------------------


class InvalidProgress(WakelineError):
    """A progress event that is not one of the documented shapes."""

    code = "invalid_progress"


class NoTurn(WakelineError):
    """Progress from a token that belongs to no running turn (the operator's)."""

    code = "no_turn"


# --- the Linear app's install ------------------------------------------------------------


class InstallRefused(WakelineError):
    """An install of the Linear app could not complete; nothing was written."""

    code = "install_refused"


# --- workspaces ------------------------------------------------------------------------


class WorkspaceFailed(WakelineError):
    """A conversation's workspace (a directory or a git worktree) could not be prepared."""

    code = "workspace_failed"


class UploadFailed(WakelineError):
    """A file of Linear's file storage could not be fetched for a turn (the detail says why:
    an HTTP status, too big, a timeout); the turn runs anyway and its prompt says so."""

    code = "upload_failed"


class ConfinementFailed(WakelineError):
    """A turn could not be confined as its route asks (CONTRACT section 12): it does not run."""

    code = "confinement_failed"


# --- Matrix routes -----------------------------------------------------------------------


class MatrixUnavailable(WakelineError):
    """The Matrix connection is not up (starting, the homeserver unreachable), or it did not
    answer in time; nothing was sent."""

    code = "matrix_unavailable"


class RouteOff(WakelineError):
    """The Matrix route is switched off (a failed check names why); it reads and sends nothing."""

    code = "route_off"


class BodyChanged(Conflict):
    """An approver named the hash of the body they were shown, and it is not the approval's
    body's (the body changed since, or another was shown): nothing is approved."""

    code = "body_changed"


# --- Discord control threads ---------------------------------------------------------------


class DiscordError(WakelineError):
    """A Discord REST call failed; the subclasses say how (never with the bot token)."""

    code = "discord_error"


class DiscordUnavailable(DiscordError):
    """No answer, a 5xx, or a timeout: Discord may be down; the call is worth retrying later."""

    code = "discord_unavailable"


class DiscordRateLimited(DiscordError):
    """Discord's rate limit (or a bucket known to be empty) still holds after the bounded wait;
    nothing more was sent. `retry_after` is when the bucket should have room again."""

    code = "discord_rate_limited"

    def __init__(self, detail: str = "", retry_after: float = 1.0) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class DiscordRejected(DiscordError):
    """Discord refused the request (a 4xx other than a missing thread): retrying will not help.
    `status` and `discord_code` are Discord's."""

    code = "discord_rejected"

    def __init__(self, detail: str = "", status: int = 400, discord_code: int = 0) -> None:
        super().__init__(detail)
        self.status = status
        self.discord_code = discord_code


class DiscordUnauthorized(DiscordRejected):
    """Discord refused the bot token (401): fix `discord.token_file`, then restart."""

    code = "discord_unauthorized"


class ThreadGone(DiscordRejected):
    """Discord no longer has the channel or thread (404, Unknown Channel, code 10003)."""

    code = "thread_gone"


class BindingConflict(WakelineError):
    """A control binding would take a thread another conversation holds, or the binding to
    rebind is no longer the one the caller read."""

    code = "binding_conflict"

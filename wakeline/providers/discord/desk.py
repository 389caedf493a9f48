"""The approval desk: a Matrix route's proposed sends, shown and decided in its control thread.

Three ways in, all on the control's workers:

- `show` (a lane job): the proposal's post in the conversation's thread, once. Discord is
  the record of whether it was posted: a post not known in memory is looked for in the
  thread (the bot's messages since the proposal, by their buttons' ids) before it is
  made, and its messages carry nonces derived from the approval id, so a retry, a restart
  or a second `show` never doubles it while Discord keeps nonces (a few minutes).
- `update` (a lane job): after any change (wherever decided), the post's buttons say the
  outcome and a line says what happened.
- `click` (the interaction pool, never a lane: Discord wants the answer within 3 s) and
  `command` (`!approve ID`, `!deny ID`, as a thread command): a person decides through
  `ApprovalsService.decide`, as `discord:<user id>`, with the hash of the body that was
  shown, so a body that changed is never approved.

Who may decide: `discord.allowed_user_ids` when set, else anyone Discord lets post in the
thread; never a bot. Everything refused is answered (to the clicker alone for a click)
and changes nothing.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from wakeline.config import DiscordConfig
from wakeline.errors import (
    BodyChanged,
    Conflict,
    DiscordError,
    DiscordRejected,
    NotFound,
    ThreadGone,
)
from wakeline.models.approvals import Approval, Approvals, ApprovalStatus
from wakeline.models.bindings import Binding, Bindings
from wakeline.providers.discord import buttons, texts
from wakeline.providers.discord.buttons import Click
from wakeline.providers.discord.messages import DISCORD_EPOCH_MS, ThreadMessage
from wakeline.providers.discord.rest import DiscordRest
from wakeline.secrets import redact

log = logging.getLogger(__name__)

UPDATE_MESSAGE, CHANNEL_MESSAGE = 7, 4
EPHEMERAL = 1 << 6
SEARCH_PAGES = 10  # pages of 100 messages looked through for a post after a restart
SEARCH_SLACK_MS = 10 * 60_000  # the search starts this long before the proposal (clock skew)
SHOWN_KEPT = 10_000  # posts remembered; an older one is looked for again when needed


class Decider(Protocol):
    """`ApprovalsService`, as the desk uses it."""

    def decide(self, approval_id: str, approve: bool, who: str, *,
               body_sha256: str | None = None) -> tuple[Approval, bool]: ...

    def watch(self, watcher: Callable[[Approval], None]) -> None: ...


@dataclass(frozen=True)
class Post:
    """Where an approval's post is: its thread, the message with its buttons, and the hash
    of the body it shows ("" when only its outcome is known)."""

    thread_id: str
    message_id: str
    body_sha256: str


@dataclass
class Shown:
    """The posts made or found since start-up, by approval id; thread-safe."""

    _posts: dict[str, Post] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def get(self, approval_id: str) -> Post | None:
        """The approval's post, if known."""
        with self._lock:
            return self._posts.get(approval_id)

    def put(self, approval_id: str, post: Post) -> None:
        """Remember a post (the oldest is forgotten past `SHOWN_KEPT`)."""
        with self._lock:
            self._posts.pop(approval_id, None)
            self._posts[approval_id] = post
            while len(self._posts) > SHOWN_KEPT:
                del self._posts[next(iter(self._posts))]


def snowflake_at(ms: int) -> int:
    """The smallest Discord id of a message sent at `ms` (epoch milliseconds)."""
    return max(ms - DISCORD_EPOCH_MS, 0) << 22


def nonce(approval_id: str, part: int) -> str:
    """A post message's nonce: the same for every attempt (Discord keeps at most 25
    characters; an approval id is `apr_` and 16 hex digits)."""
    return f"ap{approval_id[4:]}{part}"


@dataclass
class Desk:
    """Shows proposed sends and takes decisions in control threads.

    Args:
        rest: Discord.
        bindings: conversation -> thread.
        rows: the approvals (read only: every decision goes through `decider`).
        decider: `ApprovalsService`; None when no Matrix connection is configured.
        settings: the `[discord]` section (allowed users, guild).
        secret_values: scrubbed from anything posted.
    """

    rest: DiscordRest
    bindings: Bindings
    rows: Approvals
    decider: Decider | None
    settings: DiscordConfig
    secret_values: list[str]
    shown: Shown = field(default_factory=Shown)

    # --- lane jobs ---------------------------------------------------------------------------

    def show(self, binding: Binding, approval_id: str) -> None:
        """The approval's post in `binding`'s thread, made unless it is there already."""
        approval = self.rows.get(approval_id)
        if approval is None:
            return  # pruned: nothing to show
        known = self.shown.get(approval_id)
        if known is not None and known.thread_id == binding.thread_id:
            return
        if self.find(binding.thread_id, approval) is not None:
            return
        parts = buttons.post_parts(approval)
        message_id = ""
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            message_id = self.rest.post(binding.thread_id, redact(part, self.secret_values),
                                        nonce(approval_id, index),
                                        components=buttons.components(approval) if last else None)
        self.shown.put(approval_id, Post(binding.thread_id, message_id, approval.body_sha256))
        log.info("approval posted", extra={"approval_id": approval_id,
                                           "thread_id": binding.thread_id, "parts": len(parts)})

    def update(self, binding: Binding, approval_id: str) -> None:
        """The post's buttons as the approval stands now (a decided one: disabled, saying the
        outcome). A post that is gone (deleted by hand) is left gone."""
        approval = self.rows.get(approval_id)
        if approval is None:
            return
        post = self.shown.get(approval_id)
        if post is None or post.thread_id != binding.thread_id:
            post = self.find(binding.thread_id, approval)
        if post is None:
            return
        try:
            self.rest.edit_message(post.thread_id, post.message_id,
                                   components=buttons.components(approval))
        except (ThreadGone, DiscordRejected) as exc:
            if isinstance(exc, ThreadGone) or exc.status == 404:
                return  # the post or its thread was deleted: the outcome line still says it
            raise

    def find(self, thread_id: str, approval: Approval) -> Post | None:
        """The approval's post in the thread, looked for among the messages since a little
        before it was proposed (at most `SEARCH_PAGES` pages), and remembered."""
        cursor = max(int(thread_id), snowflake_at(approval.created_at - SEARCH_SLACK_MS))
        for _ in range(SEARCH_PAGES):
            page = self.rest.messages_after(thread_id, cursor)
            for message in page:
                sha = buttons.post_of(message, approval.id)
                if sha is not None:
                    post = Post(thread_id, str(message["id"]), sha)
                    self.shown.put(approval.id, post)
                    return post
            if len(page) < 100:
                return None
            cursor = int(page[-1]["id"])
        return None

    # --- people deciding --------------------------------------------------------------------

    def may_decide(self, user_id: str, is_bot: bool, can_post: bool) -> bool:
        """Only people: one of `allowed_user_ids` when set, else anyone who may post there."""
        if is_bot:
            return False
        if self.settings.allowed_user_ids:
            return user_id in self.settings.allowed_user_ids
        return can_post

    def click(self, click: Click) -> None:
        """Decide what a button says, then answer the interaction: the post updated (its
        buttons say the outcome), or, when nothing changed, a word to the clicker alone."""
        try:
            answer = self._decide_click(click)
        except Exception:
            log.exception("approval click failed", extra={"interaction_id": click.interaction_id})
            answer = _ephemeral("Something went wrong: nothing may have changed; try "
                                "`wakeline approvals`.")
        try:
            self.rest.answer_interaction(click.interaction_id, click.token, answer)
        except DiscordError as exc:
            # Too late (Discord's 3 s) or refused: the outcome line still says what happened.
            log.warning("interaction not answered", extra={
                "interaction_id": click.interaction_id, "error": exc.code, "detail": exc.detail})

    def _decide_click(self, click: Click) -> dict[str, Any]:
        if self.settings.guild_id and click.guild_id != self.settings.guild_id:
            return _ephemeral(texts.NOT_ALLOWED)
        if not self.may_decide(click.user_id, click.is_bot, click.can_post):
            log.info("approval click refused: not allowed", extra={"user_id": click.user_id})
            return _ephemeral(texts.NOT_ALLOWED)
        button = buttons.parse_custom_id(click.custom_id)
        if button is None:
            log.info("approval click refused: not our button", extra={"user_id": click.user_id})
            return _ephemeral(texts.UNKNOWN_BUTTON)
        approval, refusal = self._approval_here(button.approval_id, click.channel_id)
        if approval is None:
            return _ephemeral(refusal or texts.UNKNOWN_BUTTON)
        if button.action == "done":
            return _ephemeral(_already(approval))
        decided, reply = self._decide(approval, button.action == "approve",
                                      f"discord:{click.user_id}", button.body_sha256)
        if decided is None:
            return _ephemeral(reply or texts.UNKNOWN_BUTTON)
        if click.message_id:
            self.shown.put(approval.id, Post(click.channel_id, click.message_id,
                                             button.body_sha256 or ""))
        return {"type": UPDATE_MESSAGE, "data": {"components": buttons.components(decided),
                                                 "allowed_mentions": {"parse": []}}}

    def command(self, binding: Binding, conversation_id: str, message: ThreadMessage) -> str | None:
        """`!approve ID` or `!deny ID` in a thread: the reply to post, or None when it decided
        (the outcome line, which every decision gets, says so)."""
        approval_id = message.argument
        if not approval_id:
            return texts.DECISION_USAGE
        approval, refusal = self._approval_here(approval_id, message.thread_id)
        if approval is None:
            return refusal
        if approval.conversation_id != conversation_id:
            return texts.OTHER_THREAD.format(id=f"`{approval.id}`")
        sha: str | None = None
        approve = message.command == "approve"
        if approve:
            # Exactly the body this thread showed: its post's hash, never the stored one.
            post = self.shown.get(approval.id)
            if post is None or post.thread_id != binding.thread_id:
                post = self.find(binding.thread_id, approval)
            if post is None or (not post.body_sha256 and approval.status is
                                ApprovalStatus.PENDING):
                return texts.NOT_SHOWN.format(id=f"`{approval.id}`")
            sha = post.body_sha256 or None
        decided, reply = self._decide(approval, approve, f"discord:{message.author_id}", sha)
        return None if decided is not None else reply

    def _approval_here(self, approval_id: str, thread_id: str
                       ) -> tuple[Approval | None, str | None]:
        """The approval if it may be decided in this thread, else (None, why not)."""
        if self.decider is None:
            return None, texts.NO_APPROVALS
        shown_id = f"`{approval_id}`" if buttons.is_approval_id(approval_id) else "that"
        approval = self.rows.get(approval_id) if buttons.is_approval_id(approval_id) else None
        if approval is None:
            return None, texts.NO_APPROVAL.format(id=shown_id)
        binding = self.bindings.of(approval.conversation_id)
        if binding is None or binding.thread_id != thread_id:
            log.info("approval refused: another conversation's thread",
                     extra={"approval_id": approval.id, "thread_id": thread_id})
            return None, texts.OTHER_THREAD.format(id=shown_id)
        return approval, None

    def _decide(self, approval: Approval, approve: bool, who: str, sha: str | None
                ) -> tuple[Approval | None, str | None]:
        """(the approval this call decided, None) or (None, why nothing changed)."""
        assert self.decider is not None
        shown = f"`{approval.id}`"
        try:
            decided, changed = self.decider.decide(approval.id, approve, who, body_sha256=sha)
        except NotFound:
            return None, texts.NO_APPROVAL.format(id=shown)
        except BodyChanged:
            log.warning("approval refused: the body changed since it was shown",
                        extra={"approval_id": approval.id, "by": who})
            return None, texts.BODY_CHANGED.format(id=shown)
        except Conflict as exc:
            return None, texts.CANNOT.format(id=shown, status=exc.extra.get("status", "settled"),
                                             verb="approved" if approve else "denied")
        if not changed:
            return None, _already(decided)
        return decided, None


def _already(approval: Approval) -> str:
    by = f" (by {texts.who(approval.decided_by)})" if approval.decided_by else ""
    return texts.ALREADY.format(id=f"`{approval.id}`", status=approval.status.value, by=by)


def _ephemeral(text: str) -> dict[str, Any]:
    """A callback answer only the clicker sees."""
    return {"type": CHANNEL_MESSAGE, "data": {"content": text, "flags": EPHEMERAL,
                                               "allowed_mentions": {"parse": []}}}

"""The thread work of a control: ensure, close, post, catch up, run a command, and (through
the desk) show and update a Matrix route's proposed sends.

Each `Job` reconciles one conversation's thread with what the store says now, so a
job that runs late (after a retry, or behind another job) still does the right
thing: `ensure` never touches a conversation with terminal intent (a Discord lookup
would unarchive it), `close` does nothing once the conversation is open again, and
an answer for a closed conversation is dropped. Jobs run on the control's worker
threads, one at a time per conversation; a `DiscordError` they raise tells the
control whether to retry.
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass, field
from typing import Any, Callable

from wakeline.clock import Clock, to_ms
from wakeline.config import Config
from wakeline.errors import Conflict, DiscordRejected, ThreadGone, WakelineError
from wakeline.models.bindings import Binding, Bindings, ControlTarget
from wakeline.models.rooms import MATRIX_NAMESPACE
from wakeline.providers.discord import PROVIDER, texts
from wakeline.providers.discord.desk import Desk
from wakeline.providers.discord.messages import ThreadMessage
from wakeline.providers.discord.rest import DiscordRest
from wakeline.secrets import redact

log = logging.getLogger(__name__)

# A catch-up reads at most this many pages of 100 messages per thread and run.
CATCH_UP_PAGES = 10
ARCHIVED_THREAD = 50083  # "Operation cannot be performed on an archived thread"
# The turn results a thread shows: answers, errors and questions, and a stop.
OWED_KINDS = ("response", "error", "elicitation", "stopped")
# A thread that owes more than this (its route just got a channel, or Discord was away for
# long) shows the newest ones and says how many it left out.
OWED_MAX = 5


@dataclass
class Job:
    """One piece of thread work for one conversation.

    `kind`: `ensure`, `close`, `post`, `answers`, `catch_up`, `command`, `approval_show` or
    `approval_update`. `answers` posts the turn results the thread owes (the store keeps
    them, and which were shown, so none is lost to a restart or an outage). A post is an `answer` or a lifecycle `line` (both dropped once the
    conversation is terminal), or the `closing` line (said only while the conversation is
    terminal and its thread not closed yet); its `nonce` makes a resend after a lost answer
    land once. An approval job names its `approval_id`; an update's `text` is the line that
    says what changed. `attempt` and `due` (monotonic seconds) are the control's retry
    bookkeeping.
    """

    kind: str
    conversation_id: str
    text: str = ""
    post_kind: str = "line"
    message: ThreadMessage | None = None
    after: int | None = None  # a catch-up: the cursor when the session began
    approval_id: str = ""
    nonce: str = field(default_factory=lambda: secrets.token_hex(10))
    attempt: int = 0
    due: float = 0.0


@dataclass
class Keeper:
    """Does the jobs: Discord through `rest`, the bindings through the store.

    `operate` runs an operator command (stop, reset) as the HTTP API would; `status` is
    the conversation's operator view; `journal` records thread lifecycle
    (conversation id, event, text, source id); `desk` shows and decides a Matrix route's
    proposed sends.
    """

    rest: DiscordRest
    bindings: Bindings
    config: Config
    clock: Clock
    secret_values: list[str]
    operate: Callable[[str, str], dict[str, Any]] = lambda cid, op: {}
    status: Callable[[str], dict[str, Any] | None] = lambda cid: None
    # (conversation id, event, text, source=...): a thread's lifecycle for the journal
    journal: Callable[..., None] = lambda cid, event, text, source: None
    desk: Desk | None = None

    def channel_of(self, route: str | None) -> str | None:
        """The route's parent channel (a Linear or a Matrix route's), or None when the route
        has no control thread."""
        return self.config.control_channel(route)

    def run(self, job: Job) -> list[ThreadMessage]:
        """Do one job; a catch-up returns the messages it found, oldest first."""
        target = self.bindings.target(job.conversation_id)
        if target is None:
            return []
        if job.kind == "ensure":
            self.ensure(target)
        elif job.kind == "close":
            self.close(target)
        elif job.kind == "post" and job.post_kind == "closing":
            self.say_closing(target, job.text, job.nonce)
        elif job.kind == "post":
            self.post(target, job.text, job.nonce)
        elif job.kind == "answers":
            self.answer(target)
        elif job.kind == "catch_up":
            return self.catch_up(target, job.after)
        elif job.kind == "command" and job.message is not None:
            self.command(target, job.message, job.nonce)
        elif job.kind == "approval_show" and self.desk is not None:
            binding = self.ensure(target)  # a room's first proposal may come before its thread
            if binding is not None:
                self.desk.show(binding, job.approval_id)
        elif job.kind == "approval_update" and self.desk is not None:
            # No thread: nothing was shown to update. Else the thread made ready first (a
            # week's silence archives it, and an archived thread takes no edit).
            binding = self.ensure(target) if self.bindings.of(target.conversation_id) else None
            if binding is not None:
                self.desk.update(binding, job.approval_id)
                if job.text:
                    self.post(target, job.text, job.nonce)
        return []

    # --- ensure and close -----------------------------------------------------------------

    def ensure(self, target: ControlTarget) -> Binding | None:
        """The conversation's thread, made ready: created on the first nonterminal delivery,
        reused, unarchived when archived while open, replaced when Discord lost it."""
        if target.terminal:
            return None  # terminal intent: never looked up, never unarchived
        binding = self.bindings.of(target.conversation_id)
        parent = self.channel_of(target.route)
        if binding is None:
            return self._open(target, parent) if parent else None
        try:
            thread = self.rest.channel(binding.thread_id)
        except ThreadGone:
            return self._replace(target, binding, parent or binding.parent_id)
        if thread.archived or thread.locked:
            self.rest.edit_thread(binding.thread_id, archived=False, locked=False)
        if thread.archived or thread.locked or binding.archived or binding.locked:
            self.bindings.mirror(target.conversation_id, binding.thread_id, archived=False,
                                 locked=False, now=self._now())
            self._journal(target, "thread_reopened", f"Thread {binding.thread_id} unarchived.",
                          binding.thread_id)
        return binding

    def _open(self, target: ControlTarget, parent: str) -> Binding:
        room = _is_room(target)
        if room:
            # A room has no issue: the thread is named for its route, `[matrix] alice`.
            title = texts.thread_title(texts.MATRIX_TAG, target.route, target.conversation_id)
        else:
            title = texts.thread_title(target.issue_identifier, target.title,
                                       target.conversation_id)
        thread = self._create(parent, title)
        binding = Binding(target.conversation_id, PROVIDER, thread.id, parent, title, False, False)
        self.bindings.bind(binding, self._now())
        self._journal(target, "thread_opened", f"Discord thread {thread.id} ({title}) opened.",
                      thread.id)
        issue = target.issue_identifier or target.title or "this conversation"
        opening = texts.OPENED_MATRIX.format(route=target.route) if room else \
            texts.OPENED.format(issue=issue)
        self.rest.post(thread.id, opening, self._nonce("o"))
        return binding

    def _replace(self, target: ControlTarget, binding: Binding, parent: str) -> Binding:
        thread = self._create(parent, binding.title)
        self.bindings.rebind(target.conversation_id, binding.thread_id, thread.id, parent,
                             self._now())
        self._journal(target, "thread_replaced", f"Discord thread {binding.thread_id} was gone; "
                      f"replaced by {thread.id}, same conversation and session.", thread.id)
        self.rest.post(thread.id, texts.REPLACED, self._nonce("r"))
        return Binding(target.conversation_id, PROVIDER, thread.id, parent, binding.title,
                       False, False)

    def _create(self, parent: str, title: str) -> Any:
        try:
            return self.rest.create_thread(parent, title)
        except ThreadGone as exc:
            # The parent channel itself is gone: no retry will help until the config changes.
            raise DiscordRejected(f"parent channel {parent} is gone ({exc.detail})", 404,
                                  exc.discord_code) from None

    def close(self, target: ControlTarget) -> None:
        """Terminal intent: archive and lock the thread (one edit), and record it."""
        if not target.terminal:
            return  # reopened meanwhile: the open state wins
        binding = self.bindings.of(target.conversation_id)
        if binding is None or (binding.archived and binding.locked):
            return  # terminal-first (no thread), or closed already
        thread_id = binding.thread_id
        try:
            try:
                self.rest.edit_thread(thread_id, archived=True, locked=True)
            except DiscordRejected as exc:
                if exc.discord_code != ARCHIVED_THREAD:
                    raise
                # Archived already (by Discord or by hand): only an unarchiving edit is taken.
                self.rest.edit_thread(thread_id, archived=False)
                self.rest.edit_thread(thread_id, archived=True, locked=True)
        except ThreadGone:
            pass  # deleted by hand: nothing is left to archive
        self.bindings.mirror(target.conversation_id, thread_id, archived=True, locked=True,
                             now=self._now())
        self._journal(target, "thread_closed", f"Discord thread {thread_id} archived and locked.",
                      thread_id)

    # --- messages --------------------------------------------------------------------------

    def say_closing(self, target: ControlTarget, text: str, nonce: str) -> None:
        """The closing line, before the archive: only while the conversation is terminal and
        its thread not archived and locked yet (a restart's reapplied close says nothing)."""
        binding = self.bindings.of(target.conversation_id)
        if not target.terminal or binding is None or (binding.archived and binding.locked):
            return
        try:
            self.rest.post(binding.thread_id, text, nonce)
        except ThreadGone:
            pass  # deleted by hand: the close records it

    def post(self, target: ControlTarget, text: str, nonce: str) -> None:
        """Post in the thread (split at 2,000 characters); a thread that is gone is replaced
        first. Nothing is posted for a terminal conversation (but its closing line)."""
        if target.terminal:
            return  # a late answer or line must not unarchive a closed thread
        binding = self.bindings.of(target.conversation_id)
        if binding is None:
            binding = self.ensure(target)  # the first reconciliation may not have got through
            if binding is None:
                return
        for index, chunk in enumerate(texts.split_message(redact(text, self.secret_values))):
            try:
                self.rest.post(binding.thread_id, chunk, f"{nonce}{index}")
            except (ThreadGone, DiscordRejected) as exc:
                if not isinstance(exc, ThreadGone) and exc.discord_code != ARCHIVED_THREAD:
                    raise
                # Deleted by hand (replaced), or locked by hand while the issue is open
                # (unlocked): then posted there.
                binding = self.ensure(target)
                if binding is None:
                    return
                self.rest.post(binding.thread_id, chunk, f"{nonce}{index}")

    def answer(self, target: ControlTarget) -> None:
        """Post the results the thread owes, oldest first, each marked shown once posted.

        A result's nonce is made from its row id, so a post repeated after a crash between
        the post and its mark lands once while Discord remembers the nonce (minutes). A
        closed conversation's thread takes no answer: what it owes is marked shown.
        """
        cid = target.conversation_id
        owed = self.bindings.unanswered(cid, OWED_KINDS)
        if not owed:
            return
        if target.terminal:
            self.bindings.answered(cid, owed[-1].result_id)
            return
        left_out, owed = owed[:-OWED_MAX], owed[-OWED_MAX:]
        if left_out:
            self.post(target, texts.LEFT_OUT.format(count=len(left_out)),
                      f"s{left_out[-1].result_id}:")
            self.bindings.answered(cid, left_out[-1].result_id)
        for answer in owed:
            text = texts.STOPPED if answer.result == "stopped" else \
                texts.answer(answer.result, answer.output)
            self.post(target, text, f"a{answer.result_id}:")
            self.bindings.answered(cid, answer.result_id)

    def catch_up(self, target: ControlTarget, after: int | None = None) -> list[ThreadMessage]:
        """The messages after `after` (by default the thread's cursor, or its start)."""
        binding = self.bindings.of(target.conversation_id)
        if binding is None:
            return []
        cursor = after or binding.last_message_id or int(binding.thread_id)
        found: list[ThreadMessage] = []
        try:
            for _ in range(CATCH_UP_PAGES):
                page = self.rest.messages_after(binding.thread_id, cursor)
                found += [ThreadMessage.from_rest(m) for m in page]
                if len(page) < 100:
                    break
                cursor = int(page[-1]["id"])
        except ThreadGone:
            return found  # the next reconciliation replaces the thread
        return found

    def command(self, target: ControlTarget, message: ThreadMessage, nonce: str) -> None:
        """`!stop`, `!reset`, `!status`: act on the conversation and answer in the thread.

        A reset is answered by its lifecycle line, a stop by the turn's end.
        """
        command = message.command
        reply: str | None = None
        if command in ("approve", "deny"):
            binding = self.bindings.of(target.conversation_id)
            if binding is None:
                return
            reply = self.desk.command(binding, target.conversation_id, message) \
                if self.desk is not None else texts.NO_APPROVALS
        elif command == "status":
            view = self.status(target.conversation_id)
            reply = texts.status_line(view) if view else "No such conversation."
        else:
            try:
                self.operate(target.conversation_id, str(command))
            except Conflict:
                reply = texts.NOTHING_TO_STOP if command == "stop" else \
                    texts.COMMAND_FAILED.format(command=command, detail="not now")
            except WakelineError as exc:
                reply = texts.COMMAND_FAILED.format(command=command, detail=exc.code)
        if reply:
            self.rest.post(message.thread_id, texts.split_message(reply)[0], nonce)

    # --- helpers ---------------------------------------------------------------------------

    def _now(self) -> int:
        return to_ms(self.clock.now())

    @staticmethod
    def _nonce(kind: str) -> str:
        return kind + secrets.token_hex(10)

    def _journal(self, target: ControlTarget, event: str, text: str, thread_id: str) -> None:
        self.journal(target.conversation_id, event, text,
                     source=f"{PROVIDER}:{thread_id}:{self._now()}")


def _is_room(target: ControlTarget) -> bool:
    """A Matrix room's conversation (its subject's namespace is `matrix:<connection>`)."""
    return target.namespace.startswith(MATRIX_NAMESPACE.format(connection=""))

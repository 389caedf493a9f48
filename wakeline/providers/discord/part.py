"""Discord's parts of one service, as the composition root builds, hooks and runs them.

`app.build_service` makes a `DiscordService` only when a bot token is configured (this
module is imported only then); it starts the DiscordControl actor at once (it reapplies
terminal intent to the bindings before anything else) and the Gateway thread in
`start`, after the admission writer is up. The hooks turn what the rest of wakeline
tells its listeners into tells to the actor; none of them waits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pykka

from wakeline.clock import Clock
from wakeline.config import Config
from wakeline.models.admissions import AdmissionResult
from wakeline.models.approvals import Approval
from wakeline.models.plans import AdmissionPlan
from wakeline.models.store import Store
from wakeline.providers.discord.buttons import Click
from wakeline.providers.discord.control import BACKOFF_SECONDS, DiscordControl
from wakeline.providers.discord.desk import Decider, Desk
from wakeline.providers.discord.doctor import channel_checks, gateway_check
from wakeline.providers.discord.keeper import Keeper
from wakeline.providers.discord.messages import ThreadMessage
from wakeline.providers.discord.rest import DiscordRest
from wakeline.scheduling.roles import Roles
from wakeline.service.events import Events
from wakeline.service.parts import Check

log = logging.getLogger(__name__)

DOCTOR_TIMEOUT_SECONDS = 20.0  # inside the CLI's 30 s wait for the doctor


@dataclass(frozen=True)
class DiscordTuning:
    """Waits a test shortens; the defaults are what production uses.

    `identify_wait_seconds` None keeps discord.py's own 5 s before a new IDENTIFY;
    `guild_ready_timeout` is how long discord.py waits for guilds before `on_ready`.
    """

    backoff_seconds: Sequence[float] = BACKOFF_SECONDS
    gateway_retry_seconds: Sequence[float] = (1, 2, 5, 10, 30, 60)
    identify_wait_seconds: float | None = None
    guild_ready_timeout: float = 2.0
    rest_max_wait_seconds: float = 15.0


class GatewaySink:
    """What the Gateway thread tells the control: each call a tell, never a wait."""

    def __init__(self, control: Any) -> None:
        self._control = control
        # (state, detail) for the doctor: connecting, connected, reconnecting or failed.
        self.state: tuple[str, str] = ("connecting", "")

    def message(self, message: ThreadMessage) -> None:
        """A message in a channel of the guild."""
        _tell(self._control.gateway_message, message)

    def click(self, click: Click) -> None:
        """A click on a button."""
        _tell(self._control.gateway_click, click)

    def ready(self) -> None:
        """A new session."""
        self.state = ("connected", "")
        _tell(self._control.gateway_ready)

    def disconnected(self) -> None:
        """The connection dropped (discord.py reconnects on its own)."""
        self.state = ("reconnecting", "")
        _tell(self._control.gateway_disconnected)

    def resumed(self) -> None:
        """The session went on."""
        self.state = ("connected", "resumed")
        _tell(self._control.gateway_resumed)

    def failed(self, reason: str) -> None:
        """The Gateway gave up for good."""
        self.state = ("failed", reason)
        _tell(self._control.gateway_failed, reason)


GATEWAY_ROLE = "discord-gateway"


class DiscordService:
    """The control actor, its REST client and its Gateway thread: a part (`service.parts`).

    The Gateway runs where the `discord-gateway` role is held (one host at a time); so do
    the control's sweeps (terminal intent, answers owed). It listens to admissions and to
    the turns' ends, and to the conversations a Matrix page joined.

    Args:
        admit: commits a plan through the admission writer (blocks until durable).
        operate: an operator command (stop, reset) on a conversation, as the API runs it.
        status: a conversation's operator view.
        journal: records a thread's lifecycle (conversation, event, text, source id).
        approvals: the Matrix approvals (`ApprovalsService`) decided in threads; None
            without Matrix.
    """

    name = "discord"

    def __init__(self, config: Config, token: str, secret_values: list[str], store: Store,
                 clock: Clock, *, admit: Callable[[AdmissionPlan], AdmissionResult],
                 operate: Callable[[str, str], dict[str, Any]],
                 status: Callable[[str], dict[str, Any] | None],
                 journal: Callable[..., None],
                 tuning: DiscordTuning | None = None, approvals: Decider | None = None,
                 roles: Roles | None = None, events: Events | None = None) -> None:
        self._config = config
        self._roles = roles
        self._token = token
        self._tuning = tuning or DiscordTuning()
        self.rest = DiscordRest(config.discord.api_url, token, secret_values,
                                max_wait_seconds=self._tuning.rest_max_wait_seconds)
        desk = Desk(self.rest, store.bindings, store.approvals, approvals, config.discord,
                    secret_values)
        keeper = Keeper(self.rest, store.bindings, config, clock, secret_values,
                        operate=operate, status=status, journal=journal, desk=desk)
        self.control = DiscordControl.start(keeper, store, admit, config.discord, clock,
                                            backoff_seconds=self._tuning.backoff_seconds).proxy()
        self.sink = GatewaySink(self.control)
        self._gateway: Any = None
        if events is not None:
            events.admitted.subscribe(lambda admitted: self.admitted([r for _, r in admitted]))
            events.joined.subscribe(self.joined)
            events.turn_finished.subscribe(self.turn_finished)
            events.turn_failed.subscribe(self.turn_failed)
            events.lifecycle.subscribe(self.lifecycle)
        if approvals is not None:
            approvals.watch(self.approval_changed)  # Matrix sends, shown and decided
        if roles is not None:
            roles.add(GATEWAY_ROLE, self.start_gateway, self.stop_gateway)

    def start(self) -> None:
        """The Gateway starts with the `discord-gateway` role (the engine's start takes it);
        without roles, at once."""
        if self._roles is None:
            self.start_gateway()

    def start_gateway(self) -> None:
        """Start the Gateway thread; it connects on its own, retrying while Discord is away."""
        from wakeline.providers.discord.gateway import Gateway  # discord.py: only with a token

        self._gateway = Gateway(self._token, self._config.discord.api_url, self.rest.gateway_url,
                                self.sink, retry_seconds=self._tuning.gateway_retry_seconds,
                                identify_wait_seconds=self._tuning.identify_wait_seconds,
                                guild_ready_timeout=self._tuning.guild_ready_timeout)
        self._gateway.start()

    def stop_gateway(self) -> None:
        """Close the Gateway (another host took the role over): no new messages here."""
        gateway, self._gateway = self._gateway, None
        if gateway is not None:
            try:
                gateway.stop()
            except Exception:
                log.exception("discord gateway did not stop cleanly")

    def stop(self) -> None:
        """Close the Gateway first (no new messages), then the control and its workers;
        every wait of the REST client ends at once."""
        self.rest.close()
        self.stop_gateway()
        self.control.actor_ref.stop()

    # --- hooks -------------------------------------------------------------------------------

    def admitted(self, results: Sequence[AdmissionResult]) -> None:
        """Conversations an admission group joined or changed (on the writer thread)."""
        changes = [(r.conversation_id, r.joined == r.conversation_id, r.events)
                   for r in results if r.conversation_id and (r.joined or r.events)]
        if changes:
            _tell(self.control.admitted, changes)

    def joined(self, conversation_ids: Sequence[str]) -> None:
        """Conversations whose FIFO took deliveries outside the admission writer (a Matrix
        page): their threads are reconciled as after an admission."""
        if conversation_ids:
            _tell(self.control.admitted, [(cid, True, ()) for cid in conversation_ids])

    def approval_changed(self, approval: Approval) -> None:
        """A Matrix send proposed, decided, expired, sent or failed (from any thread)."""
        _tell(self.control.approval_changed, approval)

    def turn_finished(self, finished: Any) -> None:
        """A finalised turn (`FinishedTurn`)."""
        turn = finished.turn
        _tell(self.control.turn_finished, turn.conversation_id, turn.route,
              finished.result.value)

    def turn_failed(self, turn: Any, error: str, stalled: bool) -> None:
        """A failed attempt; only a stall is said in the thread."""
        if stalled:
            _tell(self.control.turn_stalled, turn.conversation_id, turn.route, turn.attempt,
                  error)

    def lifecycle(self, conversation_id: str, event: str, text: str) -> None:
        """The supervisor's reset and abandon."""
        _tell(self.control.lifecycle, conversation_id, event)

    def tick(self, count: int) -> None:
        """Every beat where the role is held: due retries, and now and then the terminal
        sweep."""
        if self._roles is None or self._roles.held(GATEWAY_ROLE):
            _tell(self.control.tick)

    def checks(self) -> list[Check]:
        """The doctor's Discord items (asks Discord, through the control's workers)."""
        items = [gateway_check(self.sink.state)]
        try:
            waiting = self.control.backlog().get(timeout=5)
            items[0] = gateway_check(self.sink.state, waiting)
            future = self.control.diagnose(lambda: channel_checks(self._config, self.rest)) \
                .get(timeout=5)
            items += future.result(timeout=DOCTOR_TIMEOUT_SECONDS)
        except Exception as exc:
            log.warning("discord checks did not finish", extra={"error": exc.__class__.__name__})
            items.append(Check("discord_api", False, "the checks did not finish",
                               "try again; see the log"))
        return items


def _tell(method: Any, *args: Any) -> None:
    """A tell that a stopped control (shutting down) ignores: its work is redone at start
    (terminal intent reapplied, what the Gateway saw caught up)."""
    try:
        method.defer(*args)
    except pykka.ActorDeadError:
        pass

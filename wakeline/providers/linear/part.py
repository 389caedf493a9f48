"""Linear as a part of the service: the credential, the client, the tracker, the install.

Where `Authorization` comes from (a static key, or the app's own tokens renewed in the
background), the one guarded client and its request budget, the `Tracker` actor that
makes every call, the progress board the turns offer to, the file storage the turns fetch
the issue's files from, the verifier of signed webhooks, and the app's install. It listens
to admissions (answers to send, owners and users to look up) and tells the others when an
ownership lookup woke a conversation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import pykka

from wakeline.actors.tracker import Tracker
from wakeline.admission.router import Router
from wakeline.clock import Clock
from wakeline.config import Config
from wakeline.errors import Unavailable
from wakeline.journal.recorder import Recorder
from wakeline.models.store import Store
from wakeline.providers.linear.adapter import LinearWebhooks
from wakeline.providers.linear.client import LinearClient, RequestBudget
from wakeline.providers.linear.credentials import (
    AppCredential,
    AuthState,
    Credential,
    StaticCredential,
)
from wakeline.providers.linear.doctor import linear_checks, planning_checks
from wakeline.providers.linear.install import Installed, Installer
from wakeline.providers.linear.lookups import IssueLabels
from wakeline.providers.linear.oauth import TokenEndpoint
from wakeline.providers.linear.people import People
from wakeline.providers.linear.progress import Item, ProgressBoard
from wakeline.providers.linear.shared_tokens import SharedTokens
from wakeline.providers.linear.token_file import TokenFile
from wakeline.providers.linear.uploads import Uploads
from wakeline.providers.linear.workflow import WorkflowRegistry
from wakeline.secrets import Secrets
from wakeline.service.events import Events
from wakeline.service.metrics import Metrics
from wakeline.service.parts import BasePart, Check, every

log = logging.getLogger(__name__)

# Ownership and user lookups wait at least 5 s after a failure: every fourth beat is soon
# enough; planning's set-up is asked as often (it does nothing once the routes are set).
LOOKUPS_EVERY_TICKS = 4
# A turn waits this long for an issue's labels: the client's own timeouts, and a margin.
LABELS_WAIT_SECONDS = 40.0


def token_endpoint(config: Config, secrets: Secrets, clock: Clock) -> TokenEndpoint | None:
    """The OAuth app's token endpoint client; None without a client secret."""
    if secrets.client_secret is None:
        return None
    return TokenEndpoint(config.linear.oauth_url, config.linear.client_id,
                         secrets.client_secret.get_secret_value(), clock)


def linear_credential(config: Config, secrets: Secrets, clock: Clock,
                      store: Store | None = None, database_url: str = "") -> Credential | None:
    """The app's own token when `linear.client_id` is set, else the API key, else none.
    Hosts that share a database (`database_url`) share the app's tokens there."""
    if config.linear.client_id:
        own = TokenFile(config.oauth_token_path)
        tokens = SharedTokens(store, database_url, legacy=own) \
            if store is not None and database_url else own
        return AppCredential(config.linear.grant, config.linear.client_id, tokens,
                             token_endpoint(config, secrets, clock), clock, secrets.remember)
    if secrets.linear_api_key is not None:
        return StaticCredential(secrets.linear_api_key.get_secret_value())
    return None


class LinearPart(BasePart):
    """Everything of one service that talks to Linear."""

    name = "linear"

    def __init__(self, config: Config, secrets: Secrets, clock: Clock, store: Store, *,
                 shared_database: str, metrics: Metrics, recorder: Recorder, router: Router,
                 workflow: WorkflowRegistry, people: People, events: Events,
                 person_known: Callable[[str], None], operator_url: str,
                 ownership_backoff_seconds: Sequence[float]) -> None:
        self._config = config
        self._store = store
        self._recorder = recorder
        self._metrics = metrics
        self._events = events
        self.workflow = workflow if workflow.routes() else None
        self.credential = linear_credential(config, secrets, clock, store, shared_database)
        self.budget: RequestBudget | None = None
        self.client: LinearClient | None = None
        if self.credential is not None:
            self.budget = RequestBudget(config.linear.requests_per_hour, clock)
            self.client = LinearClient(config.linear.api_url, self.credential, self.budget,
                                       secrets.values())
            metrics.watch_linear_auth(self._auth_ok)
            self.credential.subscribe(self._auth_changed)
        self.board = ProgressBoard(int(config.agent.progress_interval_seconds * 1000))
        self.tracker: Any = Tracker.start(
            store, self.client, clock, config.linear.max_concurrent_requests,
            owner_of=router.owner_of, ownership_backoff_seconds=ownership_backoff_seconds,
            progress=self.board, progress_skipped=metrics.progress_was_skipped,
            workflow=self.workflow, people=people).proxy()
        self.tracker.subscribe_people(person_known)
        self.tracker.subscribe_ownership(self._ownership_settled)
        self.tracker.subscribe(lambda w: recorder.outbound(w.effect_id, w.kind.value, w.target,
                                                           w.state.value))
        # Linear's file storage, with the same credential (decision 0038).
        self.uploads = Uploads(config.linear.uploads_url, self.credential,
                               timeout_seconds=config.agent.file_timeout_seconds)
        self.webhooks = self._webhooks(config, secrets)
        self.installer: Installer | None = None
        if isinstance(self.credential, AppCredential) and self.client is not None:
            self.installer = Installer(
                self.credential, token_endpoint(config, secrets, clock), self.client, store,
                clock, config.linear.client_id,
                default_redirect_uri=f"{operator_url}/oauth/callback",
                on_installed=self._installed)
        events.admitted.subscribe(self._admitted)

    # --- what the turns call -------------------------------------------------------------

    def usable(self) -> bool:
        """Whether a token works now (writes wait for one; a turn need not)."""
        return self.credential is None or self.credential.usable()

    def kick(self) -> None:
        """Send what the outbox prepared (a turn's answer, its heartbeat)."""
        self.tracker.kick.defer()

    def progress(self, sessions: list[str], items: list[Item]) -> None:
        """A running turn's progress for its agent sessions (the runner thread): a lock, and
        a message to the tracker only when a session wakes up."""
        if self.credential is None or not self.credential.usable():
            self._metrics.progress_was_skipped(len(items) * len(sessions))  # no token: dropped
        elif self.board.offer(sessions, items):
            self.tracker.progress_waiting.defer()

    def progress_ended(self, sessions: list[str]) -> None:
        """A turn's progress is over (its answer goes next)."""
        if self.board.close(sessions):  # most turns showed nothing: no message to send
            self.tracker.progress_waiting.defer()

    def issue_labels(self, issue_id: str) -> IssueLabels:
        """An issue's labels and project, looked up once on the tracker's pool (cached); for
        a turn's runner thread, which waits for the answer.

        Raises:
            WakelineError: no credential, or Linear refused or did not answer in time.
        """
        try:
            future = self.tracker.issue_labels(issue_id).get(timeout=LABELS_WAIT_SECONDS)
            return future.result(timeout=LABELS_WAIT_SECONDS)  # type: ignore[no-any-return]
        except (pykka.Timeout, TimeoutError):
            raise Unavailable(f"Linear did not answer within {LABELS_WAIT_SECONDS:g} s") from None

    # --- the part ----------------------------------------------------------------------------

    def tick(self, count: int) -> None:
        """Every beat: send what waits, renew a due token; now and then, look up owners and
        users, and set up planning."""
        self.tracker.kick.defer()
        if isinstance(self.credential, AppCredential):
            self.credential.tick()  # a due renewal starts on a thread of its own (decision 0031)
        if every(count, LOOKUPS_EVERY_TICKS):
            self.tracker.check_ownership.defer()
            self.tracker.check_people.defer()
            self.tracker.set_up_planning.defer()

    def stop(self) -> None:
        """Calls on the wire finish; queued writes go out after the next start."""
        self.tracker.actor_ref.stop()

    def checks(self) -> list[Check]:
        """The credential, token, account, graphql, budget and planning items."""
        return self.doctor()[1]

    def doctor(self) -> tuple[dict[str, Any], list[Check]]:
        """The doctor's `linear` summary and its Linear items."""
        summary, checks = linear_checks(self._config, self._store, self.credential, self.budget)
        return summary, checks + (planning_checks(self.workflow) if self.workflow else [])

    # --- listeners ---------------------------------------------------------------------------

    def _admitted(self, admitted: list[tuple[Any, Any]]) -> None:
        results = [r for _, r in admitted]
        if any(r.effects or r.wake_ids for r in results):
            self.tracker.kick.defer()  # lifecycle changes (a closure, a stop) prepared answers
        if any(r.lookup_ids for r in results):
            self.tracker.check_ownership.defer()  # off the ingress path
        if any(r.person_ids for r in results):
            self.tracker.check_people.defer()  # a person or an app? held until Linear says

    def _ownership_settled(self, conversation_id: str, owned: bool) -> None:
        self._events.woke([conversation_id])
        self._recorder.lifecycle(
            conversation_id, "owned" if owned else "not_owned",
            "Linear says the route owns this issue." if owned else
            "Linear says this issue is not in the route's projects: no turn.",
            source=f"{conversation_id}:lookup")

    def _auth_ok(self) -> bool:
        return self.credential is not None and self.credential.state().ok

    def _auth_changed(self, state: AuthState) -> None:
        self._recorder.linear_auth(state.condition, f"Linear: {state.detail}"
                                   + (f" (fix: {state.fix})" if state.fix else ""))
        if state.ok:
            self.tracker.kick.defer()  # the answers that waited for a token go out now
        else:
            log.warning("no working Linear token", extra={"state": state.condition,
                                                          "detail": state.detail})

    def _installed(self, done: Installed) -> None:
        if self.webhooks is not None and not self._config.linear.organization_id \
                and done.organization_id:
            self.webhooks.restrict_to(done.organization_id)

    def _webhooks(self, config: Config, secrets: Secrets) -> LinearWebhooks | None:
        """The signed-webhook verifier; None without a webhook secret (every delivery is
        then refused)."""
        if secrets.webhook_secret is None:
            log.warning("no webhook secret: every delivery will be refused")
            return None
        credential = self.credential
        installed_org = credential.tokens.organization_id \
            if isinstance(credential, AppCredential) and credential.tokens else None
        return LinearWebhooks(
            secrets.webhook_secret.get_secret_value(),
            freshness_seconds=config.linear.freshness_seconds,
            # The installed app's organization, unless the config names one.
            organization_id=config.linear.organization_id or installed_org or "")

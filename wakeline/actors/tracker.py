"""Tracker: every call to Linear goes through here.

Effects from the outbox are marked dispatched durably, then sent on a small
worker pool, so one slow call never holds up another and nothing waits behind
agent turns. A write goes on the wire once; the outcome settles the effect and
is published to listeners (a turn waiting for its acknowledgement listens).
Without a credential the tracker is the local backend: writes are refused,
turns still run.

It also looks up, before a conversation's first turn, which route owns an issue
whose project no signed payload stated (`check_ownership`), and an issue's labels
for a route with `repos` (`issue_labels`), through the same client and budget;
answers are cached until the next mutation. Likewise whether a
user is a person or an app (`check_people`), for deliveries held until Linear says. A `linear graphql`
update carries the intents recorded for it: they are marked dispatched when it
leaves and settled with its outcome, and echo memory is told both.
"""

from __future__ import annotations

import logging
import threading
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pykka

from wakeline.clock import Clock, to_ms
from wakeline.errors import (
    BudgetExhausted,
    LinearAuthUnavailable,
    PossiblyDispatched,
    ProviderRejected,
    RequiresConnectedLinear,
    WakelineError,
)
from wakeline.models.conversations import OwnershipCheck
from wakeline.models.outbox import EffectKind, EffectState, PendingEffect
from wakeline.models.store import Store
from wakeline.providers.linear.account import VIEWER_QUERY, record_account, recorded_account
from wakeline.providers.linear.client import LinearClient
from wakeline.providers.linear.lookups import (
    GONE,
    LABELS_QUERY,
    OWNER_QUERY,
    IssueLabels,
    IssueOwner,
    LookupCache,
    is_not_found,
    parse_labels,
    parse_owner,
)
from wakeline.providers.linear.people import USER_QUERY, Kind, People, parse_user
from wakeline.providers.linear.progress import Item, ProgressBoard
from wakeline.providers.linear.workflow import RETRY_SECONDS as PLANNING_RETRY_SECONDS
from wakeline.providers.linear.workflow import WorkflowRegistry, set_up

log = logging.getLogger(__name__)

ACTIVITY_MUTATION = (
    "mutation WakelineActivity($input: AgentActivityCreateInput!) "
    "{ agentActivityCreate(input: $input) { success agentActivity { id } } }"
)
COMMENT_MUTATION = (
    "mutation WakelineComment($input: CommentCreateInput!) "
    "{ commentCreate(input: $input) { success comment { id } } }"
)
# The updates wakeline sends itself, and their input types.
UPDATE_INPUTS = {"issueUpdate": "IssueUpdateInput", "commentUpdate": "CommentUpdateInput"}
# Waits between ownership lookups that found no answer; the last one repeats.
OWNERSHIP_BACKOFF_SECONDS: tuple[float, ...] = (5, 30, 120, 600)

# Which route owns an issue of this team and project: (route name, its turns are tainted).
OwnerOf = Callable[[str | None, str | None], "tuple[str, bool] | None"]


@dataclass(frozen=True)
class SettledWrite:
    """A write whose outcome is known, as published to listeners."""

    effect_id: str
    kind: EffectKind
    target: str
    state: EffectState
    result_ids: tuple[str, ...]


def mutation_for(effect: PendingEffect) -> tuple[str, dict[str, Any]]:
    """The GraphQL document and variables of one effect; the effect id is the created object's id."""
    if effect.kind is EffectKind.AGENT_ACTIVITY:
        data: dict[str, Any] = {"id": effect.id, "agentSessionId": effect.target,
                                "content": {"type": effect.activity_type, "body": effect.body}}
        if effect.options:
            data["signal"] = "select"
            data["signalMetadata"] = {"options": [{"label": label, "value": value}
                                                  for label, value in effect.options]}
        return ACTIVITY_MUTATION, {"input": data}
    if effect.kind is EffectKind.UPDATE:
        input_type = UPDATE_INPUTS[str(effect.update_field)]
        return (f"mutation WakelineUpdate($id: String!, $input: {input_type}!) "
                f"{{ {effect.update_field}(id: $id, input: $input) {{ success }} }}",
                {"id": effect.target, "input": effect.update_input or {}})
    return COMMENT_MUTATION, {"input": {"id": effect.id, "issueId": effect.target, "body": effect.body}}


class Tracker(pykka.ThreadingActor):
    """Owns the Linear client, the outbox dispatch and the worker pool."""

    def __init__(self, store: Store, client: LinearClient | None, clock: Clock,
                 max_concurrent_requests: int = 8, *, owner_of: OwnerOf = lambda team, project: None,
                 ownership_backoff_seconds: Sequence[float] = OWNERSHIP_BACKOFF_SECONDS,
                 progress: ProgressBoard | None = None,
                 progress_skipped: Callable[[int], None] = lambda count: None,
                 workflow: WorkflowRegistry | None = None, people: People | None = None) -> None:
        super().__init__()
        self._workflow = workflow
        self._people = people or People()
        self._person_listeners: list[Callable[[str], None]] = []
        self._setting_up = False
        self._set_up_after = 0.0
        self._board = progress or ProgressBoard(3000)  # turns offer, this actor sends
        self._progress_skipped = progress_skipped
        self._store = store
        self._client = client
        self._clock = clock
        self._workers = max_concurrent_requests
        self._owner_of = owner_of
        self._ownership_backoff = tuple(ownership_backoff_seconds)
        self._pool: ThreadPoolExecutor | None = None
        self._in_flight: set[str] = set()
        self._in_flight_targets: dict[str, str] = {}  # effect id -> its target
        self._waiting_behind = False  # the last kick left a write behind one to its target
        self._sent: set[str] = set()  # in flight and handed to a worker: may be on the wire
        self._sent_lock = threading.Lock()
        self._listeners: list[Callable[[SettledWrite], None]] = []
        self._owner_listeners: list[Callable[[str, bool], None]] = []
        self._intent_listeners: list[Callable[[list[str]], None]] = []
        self._looking_up: set[str] = set()
        self._me: Any = None
        self._cache = LookupCache(clock.monotonic)

    def on_start(self) -> None:
        """Name the thread, open the pool, and settle what a crash left in flight."""
        threading.current_thread().name = "tracker"
        self._me = self.actor_ref.proxy()  # workers tell it; a proxy costs an introspection
        self._pool = ThreadPoolExecutor(self._workers, thread_name_prefix="linear")
        if self._client is None:
            # The local backend only refuses: nothing leaves the host, so its commits need no
            # fsync of their own (decision 0017). A refusal a power cut takes back is made again.
            self._store.relax_durability()
        unknown = self._store.outbox.recover(to_ms(self._clock.now()))
        if unknown:
            log.warning("writes of unknown outcome after a restart", extra={"count": unknown})
        if self._client is not None:
            self._pool.submit(self._warm_up)  # a due renewal (or a first fetch) off the actor
        self.check_ownership()
        self.check_people()
        self.set_up_planning()

    def on_stop(self) -> None:
        """Let calls on the wire finish and settle; queued ones never left, so they go back
        to prepared and are sent after the next start."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        with self._sent_lock:
            never_sent = self._in_flight - self._sent
        for effect_id in never_sent:
            self._store.outbox.unmark(effect_id)
        self._store.close()

    # --- messages ----------------------------------------------------------------------------

    def subscribe(self, listener: Callable[[SettledWrite], None]) -> None:
        """Be told of every settled write."""
        self._listeners.append(listener)

    def kick(self) -> None:
        """Send every prepared effect not already on its way, and the progress that is due."""
        self._send_progress()
        now = to_ms(self._clock.now())
        effects = self._store.outbox.prepared(limit=100, exclude=self._in_flight)
        if not effects:
            return
        if self._client is None:
            # The local backend refuses them all, in one transaction.
            self._store.outbox.settle_all([e.id for e in effects], EffectState.REJECTED, now,
                                          error=RequiresConnectedLinear.code)
            for effect in effects:
                # Waiters (a turn about to start) re-check now, not at their 0.1 s poll.
                self._publish(SettledWrite(effect.id, effect.kind, effect.target,
                                           EffectState.REJECTED, ()))
            return
        if not self._client.credential.usable() or not self._client.budget.available():
            return  # they wait, prepared: for a token (auth listener kicks), or the budget
        # One write per target at a time, oldest first: a session's acknowledgement, progress
        # and answer land in the order they were made, also after they waited for a token.
        # A session whose ended turn still flushes its plan and links is busy too.
        busy = set(self._in_flight_targets.values()) | self._board.flushing()
        ready = []
        for effect in effects:
            if effect.target not in busy:
                busy.add(effect.target)
                ready.append(effect)
        self._waiting_behind = len(ready) < len(effects)
        # Durably marked before any of them leaves: one transaction for the whole kick.
        marked = set(self._store.outbox.mark_all_dispatched([e.id for e in ready], now))
        for effect in ready:
            if effect.id not in marked:
                continue
            self._cache.retire()  # a write is on its way: what was looked up may change
            self._in_flight.add(effect.id)
            self._in_flight_targets[effect.id] = effect.target
            assert self._pool is not None
            self._pool.submit(self._send, effect)

    # --- progress ----------------------------------------------------------------------------

    def progress_waiting(self) -> None:
        """A session has progress waiting (or its turn ended): send what is due."""
        self._send_progress()

    def progress_sent(self, key: str) -> None:
        """A worker finished a progress write: the session may write again."""
        self._in_flight_targets.pop(key, None)
        self.kick()  # the next progress write, or an answer that waited behind this one

    def _send_progress(self) -> None:
        skipped = self._board.drain_skipped()
        if skipped:
            self._progress_skipped(skipped)
        due = self._board.take(int(self._clock.monotonic() * 1000),
                               set(self._in_flight_targets.values()))
        for session_id, item in due:
            key = f"progress:{uuid.uuid4()}"
            self._in_flight_targets[key] = session_id
            assert self._pool is not None
            self._pool.submit(self._write_progress, key, session_id, item)

    def settled(self, write: SettledWrite | None, effect_id: str) -> None:
        """A worker recorded an effect's outcome (None: it never left, the budget refused)."""
        self._in_flight.discard(effect_id)
        self._in_flight_targets.pop(effect_id, None)
        with self._sent_lock:
            self._sent.discard(effect_id)
        if write is not None:
            self._publish(write)
        if self._waiting_behind:
            self.kick()  # the next write to the same target may go now

    def _publish(self, write: SettledWrite) -> None:
        for listener in self._listeners:
            try:
                listener(write)
            except Exception:
                log.exception("write listener failed")

    def call(self, query: str, variables: dict[str, Any] | None = None,
             operation_name: str | None = None, *, mutation: bool = False,
             intents: Sequence[str] = ()) -> Future[dict[str, Any]]:
        """Run one GraphQL operation on the pool; the caller waits on the returned future.

        A mutation retires every cached lookup; a query keeps them. `intents` are the
        recorded intents of the write: dispatched as it leaves, settled with its outcome.
        """
        if self._client is None:
            if intents:
                self._settle_intents(list(intents), EffectState.RELEASED, RequiresConnectedLinear.code, ())
            raise RequiresConnectedLinear("no Linear credential is configured")
        if mutation:
            self._cache.retire()
        assert self._pool is not None
        if intents:
            return self._pool.submit(self._write, list(intents), query, variables, operation_name)
        return self._pool.submit(self._client.execute, query, variables, operation_name)

    def issue_labels(self, issue_id: str) -> Future[IssueLabels]:
        """An issue's labels and project, on the pool (cached like its owner); the caller, a
        turn's runner thread, waits on the returned future.

        Raises:
            RequiresConnectedLinear: no credential (the future raises Linear's refusals).
        """
        if self._client is None:
            raise RequiresConnectedLinear("no Linear credential: the issue's labels cannot be "
                                          "looked up")
        assert self._pool is not None
        return self._pool.submit(self._issue_labels, issue_id)

    def subscribe_intents(self, listener: Callable[[list[str]], None]) -> None:
        """Be told of intents as their write goes on the wire (the settled ones are published
        like every settled write)."""
        self._intent_listeners.append(listener)

    def subscribe_ownership(self, listener: Callable[[str, bool], None]) -> None:
        """Be told every conversation whose ownership a lookup settled, and whether it is owned."""
        self._owner_listeners.append(listener)

    def check_ownership(self) -> None:
        """Look up the owner of every conversation waiting for one whose attempt is due."""
        now = to_ms(self._clock.now())
        try:
            due = self._store.conversations.ownership_due(now)
        except Exception:
            log.exception("cannot read the ownership checks due")
            return
        for check in due:
            if check.conversation_id in self._looking_up:
                continue
            self._looking_up.add(check.conversation_id)
            assert self._pool is not None
            self._pool.submit(self._look_up_owner, check)

    def ownership_checked(self, conversation_id: str, settled: bool, owned: bool = False) -> None:
        """A worker finished a lookup; a settled one wakes the conversation."""
        self._looking_up.discard(conversation_id)
        if not settled:
            return
        for listener in self._owner_listeners:
            try:
                listener(conversation_id, owned)
            except Exception:
                log.exception("ownership listener failed")

    def subscribe_people(self, listener: Callable[[str], None]) -> None:
        """Be told, on the worker that asked, each user Linear has named a person or an app
        (the entries held for it are then decided again)."""
        self._person_listeners.append(listener)

    def check_people(self) -> None:
        """Ask Linear about every user whose held deliveries' lookup is due."""
        try:
            due = self._store.people.due(to_ms(self._clock.now()))
        except Exception:
            log.exception("cannot read the person checks due")
            return
        for actor_id, _attempts in due:
            if ("user:" + actor_id) in self._looking_up:
                continue
            self._looking_up.add("user:" + actor_id)
            assert self._pool is not None
            self._pool.submit(self._look_up_person, actor_id)

    def person_checked(self, actor_id: str) -> None:
        """A worker finished a user lookup (answered or not)."""
        self._looking_up.discard("user:" + actor_id)

    def connected(self) -> bool:
        """True when a credential is configured."""
        return self._client is not None

    def set_up_planning(self) -> None:
        """Find or create the planning routes' workflow states (once; again a minute after
        Linear could not be asked)."""
        registry = self._workflow
        if registry is None or not registry.waiting() or self._setting_up:
            return
        if self._client is None:
            registry.failed("no Linear credential: planning needs wakeline's Linear app")
            return
        if self._clock.monotonic() < self._set_up_after:
            return
        self._setting_up = True
        assert self._pool is not None
        self._pool.submit(self._set_up_planning)

    def planning_set_up(self, ok: bool) -> None:
        """A worker finished (or failed) the planning set-up."""
        self._setting_up = False
        if not ok:
            self._set_up_after = self._clock.monotonic() + PLANNING_RETRY_SECONDS

    def _set_up_planning(self) -> None:
        assert self._workflow is not None and self._client is not None
        client, ok = self._client, False
        try:
            set_up(self._workflow,
                   lambda query, variables, name, mutation=False: client.execute(query, variables, name),
                   self._own_account)
            ok = True
        except WakelineError as exc:
            self._workflow.failed(f"Linear could not be asked ({exc.code}): planning waits and "
                                  "tries again")
            log.warning("planning set-up failed", extra={"error": exc.code})
        except Exception:
            self._workflow.failed("planning set-up failed: see the log")
            log.exception("planning set-up failed")
        finally:
            self._store.close()
        try:
            self._me.planning_set_up.defer(ok)
        except pykka.ActorDeadError:
            pass

    def _own_account(self) -> str:
        """wakeline's own account id: as recorded for this credential, else one `viewer`."""
        assert self._client is not None
        credential = self._client.credential
        known = recorded_account(self._store, credential.identity())
        if known:
            return str(known["id"])
        viewer = (self._client.execute(VIEWER_QUERY, None, "WakelineViewer").get("data") or {}) \
            .get("viewer") or {}
        if not isinstance(viewer.get("id"), str):
            raise ProviderRejected("Linear's answer names no viewer")
        record_account(self._store, account_id=viewer["id"], name=viewer.get("name"),
                       kind=credential.kind, identity=credential.identity(),
                       now_ms=to_ms(self._clock.now()))
        return str(viewer["id"])

    def _warm_up(self) -> None:
        """On a worker: renew the token now if it is due (or fetch a first one)."""
        try:
            assert self._client is not None
            self._client.credential.header()
        except LinearAuthUnavailable as exc:
            log.warning("no working Linear token", extra={"error": exc.detail})
        except Exception:
            log.exception("preparing the Linear token failed")

    # --- worker side -------------------------------------------------------------------------

    def _send(self, effect: PendingEffect) -> None:
        with self._sent_lock:
            self._sent.add(effect.id)
        state: EffectState | None
        error, ids = None, ()
        query, variables = mutation_for(effect)
        try:
            assert self._client is not None
            body = self._client.execute(query, variables)
            state, ids = EffectState.CONFIRMED, tuple(_created_ids(body))
        except (BudgetExhausted, LinearAuthUnavailable):
            state = None  # never left (or Linear refused the token, running nothing): it waits
        except ProviderRejected as exc:
            if "RATELIMITED" in exc.extra.get("codes", ()):
                state = None  # Linear ran nothing: it waits for the reset and goes then
            else:
                state, error = EffectState.REJECTED, exc.detail
        except PossiblyDispatched as exc:
            state, error = EffectState.OUTCOME_UNKNOWN, exc.detail
        except WakelineError as exc:
            state, error = EffectState.REJECTED, exc.detail or exc.code
        except Exception as exc:  # never leave an effect in flight forever
            log.exception("sending an effect failed", extra={"effect_id": effect.id})
            state, error = EffectState.OUTCOME_UNKNOWN, exc.__class__.__name__
        if state is not EffectState.CONFIRMED:
            log.warning("write to Linear not confirmed",
                        extra={"effect_id": effect.id, "state": state, "error": error})
        # The worker records the outcome itself, so it is kept even while the actor stops.
        write = None
        try:
            if state is None:
                self._store.outbox.unmark(effect.id)
            else:
                self._store.outbox.settle(effect.id, state, to_ms(self._clock.now()), error=error,
                                          result_ids=list(ids))
                write = SettledWrite(effect.id, effect.kind, effect.target, state, ids)
        except Exception:
            log.exception("recording a write's outcome failed", extra={"effect_id": effect.id})
        try:
            self._me.settled.defer(write, effect.id)
        except pykka.ActorDeadError:
            pass  # stopping: nobody is left to tell


    def _write_progress(self, key: str, session_id: str, item: Item) -> None:
        """On a worker: one attempt, shed first when the budget runs low; never retried."""
        query, variables = item.request(session_id)
        try:
            assert self._client is not None
            self._client.execute(query, variables, optional=True)
        except (BudgetExhausted, LinearAuthUnavailable):
            self._progress_skipped(1)
        except WakelineError as exc:
            log.info("progress write not confirmed", extra={"session_id": session_id,
                                                            "error": exc.code})
        except Exception:
            log.exception("progress write failed", extra={"session_id": session_id})
        try:
            self._me.progress_sent.defer(key)
        except pykka.ActorDeadError:
            pass

    def _write(self, intents: list[str], query: str, variables: dict[str, Any] | None,
               operation_name: str | None) -> dict[str, Any]:
        """On a worker: one wire attempt of a write with intents, whose outcome settles them."""
        assert self._client is not None
        self._store.outbox.mark_all_dispatched(intents, to_ms(self._clock.now()))
        for listener in self._intent_listeners:
            try:
                listener(intents)
            except Exception:
                log.exception("intent listener failed")
        state, error, ids = EffectState.OUTCOME_UNKNOWN, None, ()
        try:
            body = self._client.execute(query, variables, operation_name)
            state, ids = EffectState.CONFIRMED, tuple(_created_ids(body))
            return body
        except (BudgetExhausted, RequiresConnectedLinear) as exc:
            state, error = EffectState.RELEASED, exc.code  # refused before it left: no echo
            raise
        except ProviderRejected as exc:
            state, error = EffectState.REJECTED, exc.detail
            raise
        except WakelineError as exc:
            error = exc.detail or exc.code
            raise
        except Exception as exc:  # it may have left: never guessed absent
            error = exc.__class__.__name__
            raise
        finally:
            self._settle_intents(intents, state, error, ids)

    def _settle_intents(self, intents: list[str], state: EffectState, error: str | None,
                        ids: tuple[str, ...]) -> None:
        """Record a write's outcome on its intents, then publish each as a settled write."""
        now = to_ms(self._clock.now())
        writes = []
        try:
            for effect_id in intents:
                self._store.outbox.settle(effect_id, state, now, error=error, result_ids=list(ids))
                target = (self._store.outbox.get(effect_id) or {}).get("target", "")
                writes.append(SettledWrite(effect_id, EffectKind.MUTATION, target, state, ids))
        except Exception:
            log.exception("recording a write's outcome failed", extra={"effects": intents})
        finally:
            self._store.close()
        if state is not EffectState.CONFIRMED:
            log.warning("linear write not confirmed", extra={"effects": intents, "state": state})
        for write in writes:
            try:
                self._me.settled.defer(write, write.effect_id)
            except pykka.ActorDeadError:
                pass

    def _look_up_owner(self, check: OwnershipCheck) -> None:
        """On a worker: ask Linear once who owns the issue; record the answer or the failure."""
        cid, settled, owned = check.conversation_id, False, False
        try:
            try:
                owner = self._issue_owner(check.issue_id)
            except (BudgetExhausted, PossiblyDispatched, ProviderRejected,
                    RequiresConnectedLinear) as exc:
                # Never guessed: without an answer the conversation waits and asks again.
                error = f"{exc.code}: {exc.detail}" if exc.detail else exc.code
                delay = self._store.conversations.ownership_failed(
                    cid, to_ms(self._clock.now()), error, self._ownership_backoff)
                log.warning("ownership lookup failed", extra={
                    "conversation_id": cid, "error": exc.code, "retry_in_seconds": delay})
            else:
                found = None if owner.gone else self._owner_of(owner.team_key, owner.project_id)
                owned = found is not None
                settled = self._store.conversations.settle_ownership(
                    cid, to_ms(self._clock.now()), route=found[0] if found else None,
                    project_id=owner.project_id, answer=owner.to_json(),
                    tainted=bool(found and found[1]))
                log.info("ownership settled", extra={"conversation_id": cid,
                                                     "route": found[0] if found else None})
        except Exception:
            log.exception("ownership lookup crashed", extra={"conversation_id": cid})
        finally:
            self._store.close()
        try:
            self._me.ownership_checked(cid, settled, owned)
        except pykka.ActorDeadError:
            pass

    def _look_up_person(self, actor_id: str) -> None:
        """On a worker: learn whether `actor_id` is a person or an app (the store first: an
        answer survives restarts and another host may have asked), then let the listeners
        decide its held deliveries again."""
        try:
            known = self._store.people.kind_of(actor_id)
            if known is None:
                try:
                    if self._client is None:
                        raise RequiresConnectedLinear("no Linear credential: who this user is "
                                                      "cannot be looked up")
                    kind = parse_user(self._client.execute(USER_QUERY, {"id": actor_id},
                                                           "WakelineUser"))
                except ProviderRejected as exc:
                    if not is_not_found(exc):
                        raise
                    kind = Kind.GONE
                known = self._store.people.learn(actor_id, kind.value, to_ms(self._clock.now()))
                log.info("linear user looked up", extra={"user_id": actor_id, "kind": known})
            self._people.learn(actor_id, Kind(known))
            self._store.people.drop_settled(actor_id)
            for listener in self._person_listeners:
                listener(actor_id)
        except (BudgetExhausted, PossiblyDispatched, ProviderRejected,
                RequiresConnectedLinear) as exc:
            # Never guessed: the held deliveries wait and the lookup is asked again.
            error = f"{exc.code}: {exc.detail}" if exc.detail else exc.code
            delay = self._store.people.failed(actor_id, to_ms(self._clock.now()), error,
                                              self._ownership_backoff)
            log.warning("user lookup failed", extra={"user_id": actor_id, "error": exc.code,
                                                     "retry_in_seconds": delay})
        except Exception:
            log.exception("user lookup crashed", extra={"user_id": actor_id})
        finally:
            self._store.close()
        try:
            self._me.person_checked.defer(actor_id)
        except pykka.ActorDeadError:
            pass

    def _issue_owner(self, issue_id: str) -> IssueOwner:
        if self._client is None:
            raise RequiresConnectedLinear("no Linear credential: the owner of this issue cannot be "
                                          "looked up")
        key = f"owner:{issue_id}"
        cached = self._cache.get(key)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        try:
            owner = parse_owner(self._client.execute(OWNER_QUERY, {"id": issue_id},
                                                     "WakelineIssueOwner"))
        except ProviderRejected as exc:
            if not is_not_found(exc):
                raise
            owner = GONE
        self._cache.put(key, owner)
        return owner

    def _issue_labels(self, issue_id: str) -> IssueLabels:
        """On a worker: the cached answer, else one query."""
        assert self._client is not None
        key = f"labels:{issue_id}"
        cached = self._cache.get(key)
        if cached is not None:
            return cached  # type: ignore[no-any-return]
        try:
            found = parse_labels(self._client.execute(LABELS_QUERY, {"id": issue_id},
                                                      "WakelineIssueLabels"))
        except ProviderRejected as exc:
            if not is_not_found(exc):
                raise
            found = IssueLabels((), None, gone=True)
        self._cache.put(key, found)
        return found


def _created_ids(body: dict[str, Any]) -> list[str]:
    ids = []
    for result in (body.get("data") or {}).values():
        if isinstance(result, dict):
            for value in result.values():
                if isinstance(value, dict) and isinstance(value.get("id"), str):
                    ids.append(value["id"])
    return ids

"""ConversationActor: a turn slot that runs one conversation's turns, one at a time.

The supervisor starts `max_concurrent_turns` of these once and binds each, by
`serve`, to the conversation it runs next: a turn costs no thread, no actor and
no store connection of its own. The actor never blocks its mailbox on an agent:
the child runs on a `TurnProcess` thread that tells the actor when it ends, so
stop, reset and wake messages are handled while a turn runs. A slot stays bound
from `serve` until it reports `turn_ended`; the supervisor then decides whether
it runs that conversation again or serves another.
"""

from __future__ import annotations

import itertools
import logging
import signal
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import pykka

from wakeline.admission import planning
from wakeline.agents.registry import agent_argv, reader_for
from wakeline.agents.streams import PlanUpdate
from wakeline.clock import to_ms
from wakeline.config import RouteConfig
from wakeline.models.fifo import MAX_LEASED_ATTEMPTS, ClaimedTurn
from wakeline.models.states import TurnResultKind, TurnState
from wakeline.providers.linear import replies
from wakeline.sandbox.part import Confined, Decision
from wakeline.turns.env import (
    FinishedTurn,
    TurnEnv,
    agent_environment,
    agent_path,
    route_command,
)
from wakeline.turns.preparation import Preparation
from wakeline.turns.progress import TurnProgress
from wakeline.turns.prompts import prompt_for
from wakeline.turns.runner import RunOutcome, TurnProcess, TurnSpec, gather_seconds
from wakeline.turns.tokens import Lane
from wakeline.turns.workspaces import Snapshot

log = logging.getLogger(__name__)

RESULT_BY_EXIT = {0: TurnResultKind.RESPONSE, 1: TurnResultKind.ERROR, 2: TurnResultKind.ELICITATION}
RESULT_BY_ANSWER = {"response": TurnResultKind.RESPONSE, "error": TurnResultKind.ERROR,
                    "elicitation": TurnResultKind.ELICITATION}


@dataclass
class _Running:
    turn: ClaimedTurn
    process: TurnProcess
    token: str
    started: float
    stop_reason: TurnResultKind | str | None = None
    stop_requested: float | None = None
    killed: bool = False
    last_heartbeat: float = 0.0
    progress: TurnProgress | None = None
    phase: str | None = None  # a planning route's turn: "plan" or "execute"
    sessions: tuple[str, ...] = ()  # the Linear agent sessions its answer goes to


class ConversationActor(pykka.ThreadingActor):
    """A turn slot: serialises the turns of the conversation it is bound to."""

    def __init__(self, env: TurnEnv, supervisor: Any, slot: int = 0) -> None:
        super().__init__()
        self.conversation_id = ""  # bound by `serve`
        self.slot = slot
        self._env = env
        self._supervisor = supervisor
        self._running: _Running | None = None
        self._me: Any = None
        # (may it run again, is a cleanup owed), read as a turn was finalised; else None
        self._next_step: tuple[bool, bool] | None = None

    def on_start(self) -> None:
        """Make the proxy and set up this thread's store connection, once for every turn."""
        threading.current_thread().name = f"turn-slot-{self.slot}"
        self._me = self.actor_ref.proxy()
        self._env.store.relax_durability()  # claims and finalisation: see the Store's note

    def on_stop(self) -> None:
        """Leave the turn record for recovery; stop the child (SIGTERM, SIGKILL after the
        grace period); close this thread's connection."""
        running = self._running
        if running is not None:
            self._env.tokens.revoke(running.token)
            running.process.terminate()
            if not running.process.wait_exit(self._env.kill_grace_seconds):
                running.process.kill()
        self._env.store.close()

    def on_failure(self, *args: Any) -> None:
        """A message that raised (pykka has logged it): the slot and its turn go on; what the
        store did not record, recovery repairs at the next start."""

    # --- messages ----------------------------------------------------------------------------

    def serve(self, conversation_id: str) -> None:
        """Bind this idle slot to a conversation and run its next turn."""
        assert self._running is None, "a slot is rebound only once its turn has ended"
        self.conversation_id = conversation_id
        threading.current_thread().name = f"turn-slot-{self.slot}-{conversation_id}"
        self.run_next()

    def run_next(self) -> None:
        """Claim (or resume) a turn and start it; report `turn_ended` when there is none."""
        if self._running is not None:
            return
        now = to_ms(self._env.clock.now())
        try:
            turn = self._env.store.fifo.claim(self.conversation_id, now)
        except Exception:
            log.exception("claim failed", extra={"conversation_id": self.conversation_id})
            turn = None
        if turn is None:
            self._supervisor.turn_ended.defer(self.conversation_id)
            return
        try:
            self._start(turn)
        except Exception as exc:
            # Could not even start (workspace, prompt file): a failed attempt, retried with backoff.
            log.exception("turn could not start", extra={"turn_id": turn.turn_id})
            self._env.live.pop(turn.turn_id, None)
            if self._running is not None:
                self._env.tokens.revoke(self._running.token)
                self._running = None
            self._env.store.fifo.fail(turn.turn_id, f"could not start: {exc.__class__.__name__}", now,
                                      self._env.backoff_seconds,
                                      replies.stalled(turn, turn.attempt, exc.__class__.__name__))
            self._supervisor.turn_ended.defer(self.conversation_id)

    def wake(self) -> None:
        """New work arrived, or the conversation changed: stop a turn that no longer exists
        or that Linear asked to stop."""
        running = self._running
        if running is not None and running.stop_reason is None:
            self._stopped_elsewhere(running)

    def stop_turn(self) -> bool:
        """Stop the running turn; its deliveries complete as stopped. False when none runs."""
        if self._running is None or self._running.stop_reason is not None:
            return False
        self._request_stop(TurnResultKind.STOPPED)
        return True

    def reset(self) -> dict[str, Any]:
        """A clear boundary now: new session, earlier work completed as reset, the turn stopped."""
        now = to_ms(self._env.clock.now())
        outcome = self._env.store.fifo.reset(self.conversation_id, now, replies.RESET_REPLY)
        if self._running is not None and self._running.stop_reason is None:
            self._request_stop(TurnResultKind.RESET)
        return {"sessionId": outcome.session_id if outcome else None,
                "completed": outcome.completed if outcome else 0}

    def tick(self) -> None:
        """Enforce the turn timeout and the kill grace period, by the injected clock; stop a
        turn that a reset, a closure or a stop made elsewhere (another host) took away."""
        running = self._running
        if running is None:
            return
        if running.stop_reason is None and self._stopped_elsewhere(running):
            return
        now = self._env.clock.monotonic()
        agent = self._env.config.agent
        if running.stop_reason is None and now - running.started > agent.timeout_seconds:
            log.warning("turn timed out", extra={"turn_id": running.turn.turn_id})
            self._request_stop("timeout")
        elif running.stop_reason is None and \
                now - max(running.started, running.last_heartbeat) > agent.heartbeat_seconds:
            # Linear marks a session stale after 30 minutes without an activity.
            running.last_heartbeat = now
            turn = running.turn
            effects = replies.for_sessions(replies.sessions_of(turn), "thought", replies.HEARTBEAT,
                                           turn.conversation_id)
            if effects:
                self._env.store.fifo.note_heartbeat(turn.turn_id, to_ms(self._env.clock.now()), effects)
                self._env.kick_tracker()
        elif (running.stop_requested is not None and not running.killed
              and now - running.stop_requested > self._env.kill_grace_seconds):
            running.killed = True
            running.process.kill()

    def runner_finished(self, turn_id: str, outcome: RunOutcome) -> None:
        """The child exited: finalise, or record a failed attempt; then report to the supervisor."""
        running = self._running
        if running is None or running.turn.turn_id != turn_id:
            return
        self._running = None
        env = self._env
        env.tokens.revoke(running.token)
        env.live.pop(turn_id, None)
        if outcome.skipped_lines:
            env.lines_skipped(outcome.skipped_lines)
        turn = running.turn
        if outcome.resume_refused and turn.runner_session and running.stop_reason is None:
            # The CLI no longer knows its session (its state was lost): once more, fresh.
            log.warning("agent session unknown to the CLI; running the turn without it",
                        extra={"turn_id": turn_id})
            env.store.fifo.set_runner_session(turn.conversation_id, None)
            try:
                self._start(replace(turn, runner_session=None))
                return
            except Exception:
                log.exception("turn could not start again", extra={"turn_id": turn_id})
        if running.phase == "plan" and running.stop_reason is None and running.progress \
                and self._result(outcome) is TurnResultKind.RESPONSE:
            steps = planning.plan_steps(outcome.stdout)
            if steps:  # the plan, mirrored as the session's native plan before the question
                running.progress.offer([PlanUpdate(steps)])
        # Whatever progress still waits goes before the answer (or is dropped).
        env.progress_ended(list(running.sessions))
        self._next_step = None
        try:
            self._settle(running, outcome)
        except Exception:
            # The turn record survives: recovery re-runs it. Never lose it silently.
            log.exception("finalising failed", extra={"turn_id": turn_id})
            self._next_step = None  # read in a transaction that did not commit
        self._supervisor.turn_ended.defer(self.conversation_id, self._next_step)

    # --- internals ---------------------------------------------------------------------------

    def _stopped_elsewhere(self, running: _Running) -> bool:
        """One read: the turn is gone (reset, retired) or a stop was asked for in the store."""
        try:
            alive, stop_by = self._env.store.fifo.turn_status(running.turn.turn_id)
        except Exception:
            log.exception("turn status unreadable", extra={"turn_id": running.turn.turn_id})
            return False
        if not alive:
            self._request_stop(TurnResultKind.RETIRED)
        elif stop_by is not None:
            self._request_stop("linear_stop" if stop_by == "linear" else TurnResultKind.STOPPED)
        return not alive or stop_by is not None

    def _request_stop(self, reason: TurnResultKind | str) -> None:
        running = self._running
        assert running is not None
        running.stop_reason = reason
        running.stop_requested = self._env.clock.monotonic()
        running.process.terminate()

    def _settle(self, running: _Running, outcome: RunOutcome) -> None:
        turn, store = running.turn, self._env.store
        now = to_ms(self._env.clock.now())
        reason = running.stop_reason
        if reason in (TurnResultKind.RESET, TurnResultKind.RETIRED):
            return  # the reset or retirement already completed the turn's deliveries
        if reason == "linear_stop":
            # Linear's stop already answered with a response at admission.
            self._finalise(turn, TurnResultKind.STOPPED, now, outcome, "stopped from Linear")
            return
        if reason is TurnResultKind.STOPPED:
            self._finalise(turn, TurnResultKind.STOPPED, now, outcome, "stopped by the operator",
                           replies.for_sessions(replies.sessions_of(turn), "response", replies.STOPPED,
                                                turn.conversation_id))
            return
        result = self._result(outcome) if reason is None else None
        if result is not None:
            if running.phase == "plan" and result is TurnResultKind.RESPONSE:
                self._post_plan(running, outcome, now)
                return
            options = tuple((o.label, o.value) for o in running.progress.options) \
                if running.progress else ()
            if options and result is TurnResultKind.RESPONSE:
                result = TurnResultKind.ELICITATION  # the agent offered choices: a question
            route = self._env.config.route(turn.route)
            effects = replies.turn_result(turn, result, outcome.stdout,
                                          route.reply if route else "none", options,
                                          sessions=running.sessions)
            self._finalise(turn, result, now, outcome, outcome.stdout, effects)
            return
        error = self._failure_text(reason, outcome)
        backoff = self._env.backoff_seconds
        if running.phase == "execute":
            backoff = backoff[:MAX_LEASED_ATTEMPTS - 1]  # an execution runs at most 3 times
        state = store.fifo.fail(turn.turn_id, error, now, backoff,
                                replies.stalled(turn, turn.attempt, error))
        self._env.kick_tracker()
        log.warning("turn failed", extra={"turn_id": turn.turn_id, "attempt": turn.attempt,
                                           "error": error, "state": state})
        self._env.events.turn_failed(turn, error, state is TurnState.STALLED)
        if state is TurnState.STALLED:
            log.error("conversation stalled", extra={"conversation_id": turn.conversation_id})

    @staticmethod
    def _result(outcome: RunOutcome) -> TurnResultKind | None:
        """A stream agent's answer says what it is; a text agent's exit code does. A signal or
        a runner that could not run the agent is a failed attempt either way."""
        if outcome.answer is not None and not outcome.signalled and not outcome.spawn_error:
            return RESULT_BY_ANSWER[outcome.answer.kind]
        return RESULT_BY_EXIT.get(outcome.exit_code)

    @staticmethod
    def _failure_text(reason: TurnResultKind | str | None, outcome: RunOutcome) -> str:
        if reason == "timeout":
            return "timed out"
        if outcome.spawn_error:
            return outcome.spawn_error
        if outcome.signalled:
            return f"killed by {signal.Signals(-outcome.exit_code).name}"  # type: ignore[operator]
        tail = outcome.stderr_tail.strip().splitlines()[-1:] if outcome.stderr_tail else []
        return f"exit code {outcome.exit_code}" + (f": {tail[0][:500]}" if tail else "")

    def _finalise(self, turn: ClaimedTurn, result: TurnResultKind, now: int, outcome: RunOutcome,
                  output: str, effects: Sequence[replies.EffectSpec] = (),
                  also: Callable[[], None] | None = None) -> bool:
        """Finalise (and `also`, in the same transaction); False when the turn was gone."""
        store = self._env.store

        def within() -> None:
            if also is not None:
                also()
            # What comes next, read in the same transaction, so the supervisor need not read
            # it; if the read fails, the turn's end stands and the supervisor reads it itself.
            try:
                self._next_step = store.fifo.next_step(turn.conversation_id, now)
            except Exception:
                log.exception("next step unreadable", extra={"turn_id": turn.turn_id})

        if not store.fifo.finalise(turn.turn_id, result, now, exit_code=outcome.exit_code,
                                   output=output, effects=effects, within=within):
            return False
        if effects:
            self._env.kick_tracker()
        self._env.events.turn_finished(FinishedTurn(turn, result, output, outcome.exit_code))
        return True

    def _post_plan(self, running: _Running, outcome: RunOutcome, now: int) -> None:
        """A planning turn's answer is revision N+1 of the plan: one comment (edited in place
        for each revision), the session's question with `approve`, the issue moved to
        Awaiting Plan Approval; recorded with the turn's end in one transaction."""
        env, turn = self._env, running.turn
        cid, plan = turn.conversation_id, outcome.stdout.strip() or "(the agent gave no plan)"
        gate = env.store.gates.get(cid)
        rev = gate.rev + 1
        account = env.workflow.account() if env.workflow else None
        effects: list[replies.EffectSpec] = []
        comment_id = None
        if turn.issue_id:
            comment, comment_id = replies.plan_comment(turn.issue_id, rev, plan, gate.comment_id,
                                                       account, cid)
            effects.append(comment)
            team = turn.issue_identifier.rsplit("-", 1)[0] if turn.issue_identifier else None
            states = env.workflow.states(team) if env.workflow else None
            if states is not None:
                effects.append(planning.move_issue(turn.issue_id, states.awaiting, account, cid))
        effects += [replies.activity(s, "elicitation", replies.plan_question(rev, plan), cid,
                                     replies.PLAN_OPTIONS) for s in running.sessions]
        def record() -> None:
            if not env.store.gates.posted(cid, rev, plan, comment_id or "", now):
                raise _PlanMoot  # rolls the plan's effects back with it

        try:
            posted = self._finalise(turn, TurnResultKind.RESPONSE, now, outcome, plan, effects,
                                    also=record)
        except _PlanMoot:
            self._finalise(turn, TurnResultKind.RESPONSE, now, outcome, plan)
            env.events.lifecycle(cid, "plan_moot",
                       "The plan was approved while the agent planned: this revision is not posted.")
            return
        if posted:
            env.events.lifecycle(cid, "plan_posted",
                       f"Plan revision {rev} posted for approval.")

    def _start(self, turn: ClaimedTurn) -> None:
        env = self._env
        route = env.config.route(turn.route)
        phase, plan = None, None
        sessions = tuple(replies.sessions_of(turn))
        if route is not None and route.planning:
            # Only the execution lease lets a turn change code; every other turn plans.
            gate = env.store.gates.get(turn.conversation_id)
            phase = "execute" if gate.leased else "plan"
            plan = gate.approved_plan if gate.leased else gate.plan
            sessions = sessions or ((turn.agent_session,) if turn.agent_session else ())
        decision = env.sandbox.decide(route or RouteConfig(name=turn.route or turn.kind),
                                      turn.tainted) if env.sandbox else Decision("unconfined")
        if decision.refused is not None:
            self._refuse(turn, decision.refused, sessions)
            return
        room = env.config.matrix_route(turn.route) is not None
        output = env.config.agent_output(turn.route)
        progress = self._progress_of(turn, sessions)
        # The repository, the workspace, the issue's files and the prompt are made ready on
        # the runner thread (decision 0038).
        prep = Preparation(env, turn, sessions, progress, lambda ready, files: prompt_for(
            ready, env.secret_values, phase=phase, plan=plan, room=room, files=files))
        guard = _PlanGuard(env, turn, prep) if phase == "plan" else None
        # Issued last: nothing below can fail, so a token never outlives a turn that did not start.
        lane = Lane.ROOM if (turn.tainted or turn.kind == "inbox") else Lane.WORKER
        token = env.tokens.issue_turn_token(lane, turn.conversation_id, turn.turn_id)
        env.live[turn.turn_id] = progress
        argv = tuple(agent_argv(route_command(env.config, turn.route), output,
                                turn.runner_session, read_only=phase == "plan"))
        agent_env = agent_environment(env.base_env, env.secret_values, {
            "WAKELINE_CONVERSATION_ID": turn.conversation_id,
            "WAKELINE_SESSION_ID": turn.session_id,
            "WAKELINE_TURN_ID": turn.turn_id,
            "WAKELINE_API_URL": env.api_url,
            "WAKELINE_TOKEN": token,
            "WAKELINE_ISSUE_ID": turn.issue_id or "",
            "WAKELINE_ISSUE_IDENTIFIER": turn.issue_identifier or "",
            "WAKELINE_AGENT_SESSION": turn.runner_session or "",
            "WAKELINE_PHASE": phase or "",
            "PATH": agent_path(env.base_env),
        })
        sandbox = env.sandbox

        def confine(workspace: Path) -> Confined:
            assert sandbox is not None
            return sandbox.confine(decision, turn_id=turn.turn_id,
                                   conversation_id=turn.conversation_id,
                                   issue_key=turn.issue_identifier, workspace=workspace,
                                   repo=prep.repo, argv=argv, env=agent_env, output=output)

        spec = TurnSpec(
            turn_id=turn.turn_id,
            argv=argv,
            cwd=env.workspaces.path_of(turn.conversation_id),
            env=agent_env,
            prompt="",  # composed on the runner thread
            prompt_dir=env.prompts,
            before_start=(lambda: env.await_replies(turn.conversation_id))
            if turn.replies_waiting else None,
            prepare=guard.prepare if guard else prep.prepare,
            compose=prep.compose,
            reader=reader_for(output) if output != "text" else None,
            on_progress=progress.offer,
            gather_seconds=gather_seconds(env.config.agent.progress_interval_seconds),
            after_exit=guard.restore if guard else None,
            confine=confine if decision.route is not None else None,
        )
        me = self._me

        def on_exit(outcome: RunOutcome) -> None:
            try:
                me.runner_finished.defer(turn.turn_id, outcome)
            except pykka.ActorDeadError:
                pass  # shutting down: the turn record stays for recovery

        process = TurnProcess(spec, on_exit, env.forkserver, env.runners)
        self._running = _Running(turn, process, token, env.clock.monotonic(), progress=progress,
                                 phase=phase, sessions=sessions)
        log.info("turn started", extra={"turn_id": turn.turn_id, "attempt": turn.attempt,
                                         "deliveries": len(turn.entries)})
        process.start()
        env.events.turn_started(turn, decision.label)
        if decision.note is not None:
            env.events.lifecycle(turn.conversation_id, "unconfined", decision.note)

    def _refuse(self, turn: ClaimedTurn, text: str, sessions: Sequence[str]) -> None:
        """A turn that may not run (it cannot be confined): it ends at once as an error answer."""
        log.warning("turn refused: it cannot be confined", extra={"turn_id": turn.turn_id})
        route = self._env.config.route(turn.route)
        effects = replies.turn_result(turn, TurnResultKind.ERROR, text,
                                      route.reply if route else "none", sessions=sessions)
        self._next_step = None
        self._finalise(turn, TurnResultKind.ERROR, to_ms(self._env.clock.now()),
                       RunOutcome(exit_code=None), text, effects)
        self._supervisor.turn_ended.defer(self.conversation_id, self._next_step)

    def _progress_of(self, turn: ClaimedTurn, sessions: Sequence[str]) -> TurnProgress:
        """Where this turn's progress goes: its sessions (if progress is on), the journal, the
        service's `progress` event (the control page), and the conversation's record of the
        agent's own session."""
        env = self._env
        seq = itertools.count(1)
        store, cid = env.store, turn.conversation_id
        return TurnProgress(
            turn.turn_id, cid, list(sessions), env.secret_values,
            env.progress_to_linear if env.config.agent.progress else None,
            remember_session=lambda sid: (store.relax_durability(),  # bookkeeping: 0017
                                          store.fifo.set_runner_session(cid, sid)),
            journal=lambda stage, text: env.journal_progress(turn, next(seq), stage, text),
            shown=lambda events: env.events.progress(turn, events))


class _PlanMoot(Exception):
    """A plan finished after the execution lease was taken: nothing of it is posted."""


class _PlanGuard:
    """A planning turn's workspace: as it was before the turn, whatever the agent did."""

    def __init__(self, env: TurnEnv, turn: ClaimedTurn, prep: Preparation) -> None:
        self._env = env
        self._turn = turn
        self._prep = prep
        self._path: Path | None = None
        self._snapshot: Snapshot | None = None

    def prepare(self) -> Path:
        """On the runner thread: make the workspace ready, then note what it holds."""
        self._path = self._prep.prepare()
        # Only a worktree of the route's repository: git run on a `.git` an agent made in a
        # plain directory would run what its config names, as wakeline, outside any sandbox.
        if self._prep.repo is not None:
            self._snapshot = self._env.workspaces.snapshot(self._path)
        return self._path

    def restore(self) -> None:
        """On the runner thread, after the agent's exit: put back what it changed."""
        if self._path is None or self._snapshot is None:
            return
        if self._env.workspaces.restore(self._path, self._snapshot):
            cid = self._turn.conversation_id
            self._env.events.lifecycle(cid, "plan_changes_discarded",
                             "The planning turn changed files; the workspace was put back.")

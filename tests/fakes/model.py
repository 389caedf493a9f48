"""A fake model server: a real HTTP server on 127.0.0.1 that the real agent CLIs talk to.

It speaks enough of Anthropic's Messages API (`POST /v1/messages`, streaming and not, and
`count_tokens`) for Claude Code and of OpenAI's Responses API (`POST /v1/responses`, streaming)
for Codex. A test scripts the model: a list of steps, one model answer each (a text, a tool call,
a todo list, an HTTP error). Which step a request gets is read from the request itself, never
from a counter: the number of model answers since the conversation's last user prompt. So a
retried request replays its step, and a resumed conversation starts its new prompt at step 0.
Several scripts can run at once: each has a key, and a request whose last prompt contains the
key plays that script (else the default one).

Every request is recorded (method, path, headers, body, how much history it carried, the step
it played), so a test can assert what the CLI sent and that it called nothing else.
"""

from __future__ import annotations

import itertools
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANTHROPIC = "anthropic"
OPENAI = "openai"
FAKE_MODEL_ERROR = "fake internal error"
SCRIPT_DONE = "fake model: the script has no more steps"


@dataclass(frozen=True)
class Text:
    """Answer with text and end the turn. `{history}` and `{tool_output}` are filled in: the
    number of history entries the request carried and the last tool result it held."""

    text: str


@dataclass(frozen=True)
class Tool:
    """Call a tool by the name the CLI gives it, with these arguments (Codex: a JSON object)."""

    name: str
    input: dict[str, Any]


@dataclass(frozen=True)
class Shell:
    """Run a shell command: Claude's `Bash`; Codex's shell tool, whichever the request offers."""

    command: str


@dataclass(frozen=True)
class WriteFile:
    """Create a file: Claude's `Write` (give an absolute path); Codex's `apply_patch`."""

    path: str
    content: str


@dataclass(frozen=True)
class Todo:
    """Set the todo list. Claude: one `TaskCreate` per item when `completed` is 0, else
    `TaskUpdate` marking the first `completed` tasks done. Codex: one `update_plan` call with
    the whole list (the first `completed` items done, the next one in progress)."""

    items: tuple[str, ...]
    completed: int = 0


@dataclass(frozen=True)
class Fail:
    """Answer with this HTTP status and an error body instead of a model answer."""

    status: int = 500


Step = Text | Tool | Shell | WriteFile | Todo | Fail


@dataclass
class Request:
    """One request the fake received, and what it made of it."""

    at: float
    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    dialect: str | None = None  # ANTHROPIC, OPENAI, or None for anything else
    history: int = 0  # entries in `messages` (Anthropic) or `input` (OpenAI)
    step: int | None = None  # the script step played; None: not a scripted turn
    status: int = 200

    @property
    def prompt(self) -> str:
        """The text of the conversation's last user prompt (not a tool result)."""
        return _last_prompt(self.dialect, self.body)


@dataclass
class FakeModel:
    """Start with `start()`; `url` is the base URL (Claude: as is; Codex: plus `/v1`)."""

    steps: list[Step] = field(default_factory=list)
    scripts: dict[str, list[Step]] = field(default_factory=dict)  # prompt key -> its steps
    requests: list[Request] = field(default_factory=list)
    model: str = "fake-model"

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._ids = itertools.count(1)

    def script(self, steps: Sequence[Step], key: str | None = None) -> "FakeModel":
        """Play `steps` for prompts containing `key` (every other prompt when `key` is None)."""
        with self._lock:
            if key is None:
                self.steps = list(steps)
            else:
                self.scripts[key] = list(steps)
        return self

    def start(self) -> "FakeModel":
        """Serve on a free port of 127.0.0.1 in a daemon thread."""
        self._server = _Server(("127.0.0.1", 0), _handler(self))
        # A short poll interval: stop() waits for it, once per test.
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name="fake-model",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    @property
    def url(self) -> str:
        """`http://127.0.0.1:PORT`, with no path."""
        assert self._server is not None, "start() the fake first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def recorded(self) -> list[Request]:
        """A copy of every request so far, oldest first."""
        with self._lock:
            return list(self.requests)

    def turns(self) -> list[Request]:
        """The requests that played a script step (model turns), oldest first."""
        return [r for r in self.recorded() if r.step is not None]

    def endpoints(self) -> set[str]:
        """Every distinct `METHOD /path` called (query strings dropped)."""
        return {f"{r.method} {r.path.split('?')[0]}" for r in self.recorded()}

    def clear(self) -> None:
        """Forget the recorded requests (between two runs of one test)."""
        with self._lock:
            self.requests.clear()

    def next_id(self, prefix: str) -> str:
        """A fresh, readable id: `prefix` and a zero-padded hex counter."""
        return f"{prefix}_{next(self._ids):016x}"

    def _steps_for(self, prompt: str) -> list[Step]:
        with self._lock:
            for key, steps in self.scripts.items():
                if key in prompt:
                    return list(steps)
            return list(self.steps)

    def _record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)


class _Server(ThreadingHTTPServer):
    """A threading server that lets a CLI hang up on it without a traceback on stderr."""

    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore a client closing its kept-alive connection; report anything else."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def _handler(fake: FakeModel) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to `fake`."""

    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.1 keeps the CLIs' connections alive, as a real API does; every answer has a
        # Content-Length so the client knows where it ends.
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # keep test output quiet
            pass

        def do_HEAD(self) -> None:  # noqa: N802 - Claude's probe at start (none via a proxy)
            self._answer("HEAD", lambda request: (200, "text/plain", b""))

        def do_GET(self) -> None:  # noqa: N802 - nothing to get; recorded all the same
            self._answer("GET", lambda request: _not_found(request))

        def do_POST(self) -> None:  # noqa: N802
            self._answer("POST", lambda request: _route(fake, request))

        def do_CONNECT(self) -> None:  # noqa: N802 - a CLI using us as its proxy: refuse
            self._answer("CONNECT", lambda request: _json(403, {"error": "no network in tests"}))

        def _answer(self, method: str, respond: Callable[[Request], Answer]) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                body = {"_unparsed": raw[:2000].decode(errors="replace")}
            request = Request(time.time(), method, self.path, dict(self.headers),
                              body if isinstance(body, dict) else {"_json": body})
            status, content_type, payload = respond(request)
            request.status = status
            fake._record(request)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload)))
            if content_type == "text/event-stream":
                self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            if method != "HEAD":
                self.wfile.write(payload)

    return Handler


Answer = tuple[int, str, bytes]


def _route(fake: FakeModel, request: Request) -> Answer:
    """Dispatch a POST by path; an absolute URL (a proxied request) is refused."""
    path = request.path.split("?")[0]
    if not path.startswith("/"):
        return _json(403, {"error": "no network in tests"})
    if path == "/v1/messages":
        request.dialect = ANTHROPIC
        return _anthropic(fake, request)
    if path == "/v1/messages/count_tokens":
        request.dialect = ANTHROPIC
        return _json(200, {"input_tokens": 10})
    if path == "/v1/responses":
        request.dialect = OPENAI
        return _openai(fake, request)
    return _not_found(request)


def _not_found(request: Request) -> Answer:
    return _json(404, {"error": {"type": "not_found_error",
                                 "message": f"the fake model has no {request.path}"}})


def _json(status: int, payload: dict[str, Any]) -> Answer:
    return status, "application/json", json.dumps(payload).encode()


def _sse(events: Iterator[tuple[str, dict[str, Any]]]) -> Answer:
    chunks = [f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events]
    return 200, "text/event-stream", "".join(chunks).encode()


# --- which step a request plays ------------------------------------------------------------


def _last_prompt(dialect: str | None, body: dict[str, Any]) -> str:
    """The text of the last user message that is a prompt, not tool results."""
    if dialect == ANTHROPIC:
        for message in reversed(body.get("messages") or []):
            if message.get("role") == "user" and not _has_tool_result(message):
                return _text_of(message.get("content"))
    if dialect == OPENAI:
        for item in reversed(body.get("input") or []):
            if item.get("type", "message") == "message" and item.get("role") == "user":
                return _text_of(item.get("content"))
    return ""


def _answers_since_prompt(dialect: str, body: dict[str, Any]) -> int:
    """How many model answers the history holds after the last user prompt."""
    if dialect == ANTHROPIC:
        count = 0
        for message in reversed(body.get("messages") or []):
            if message.get("role") == "user" and not _has_tool_result(message):
                break
            count += message.get("role") == "assistant"
        return count
    # OpenAI: an answer is a run of model items (messages, calls, reasoning) between inputs.
    count, in_answer = 0, False
    for item in reversed(body.get("input") or []):
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "message" and role == "user":
            break
        from_model = (kind == "message" and role == "assistant") or kind in (
            "function_call", "custom_tool_call", "local_shell_call", "reasoning")
        if from_model and not in_answer:
            count += 1
        in_answer = from_model
    return count


def _has_tool_result(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(block, dict) and block.get("type") == "tool_result" for block in content)


def _text_of(content: Any) -> str:
    """The text in a message's content, whichever shape it has."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(part.get("text") if "text" in part else part.get("content"))
                         for part in content if isinstance(part, dict))
    return ""


def _last_tool_output(dialect: str, body: dict[str, Any]) -> str:
    """The last tool result the request carries, as text."""
    if dialect == ANTHROPIC:
        for message in reversed(body.get("messages") or []):
            for block in reversed(message.get("content") or []):
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    return _text_of(block.get("content"))
        return ""
    for item in reversed(body.get("input") or []):
        if item.get("type") in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            return output if isinstance(output, str) else _text_of(output)
    return ""


def _play(fake: FakeModel, request: Request) -> Step:
    """Pick (and note on `request`) the step this request plays."""
    assert request.dialect is not None
    steps = fake._steps_for(request.prompt)
    index = _answers_since_prompt(request.dialect, request.body)
    request.step = index
    return steps[index] if index < len(steps) else Text(SCRIPT_DONE)


def _fill(text: str, request: Request) -> str:
    assert request.dialect is not None
    return (text.replace("{history}", str(request.history))
            .replace("{tool_output}", _last_tool_output(request.dialect, request.body)))


# --- Anthropic Messages API -----------------------------------------------------------------


def _anthropic(fake: FakeModel, request: Request) -> Answer:
    """Answer `POST /v1/messages`: a scripted turn when the CLI offers tools, else a side call."""
    body = request.body
    request.history = len(body.get("messages") or [])
    if not body.get("tools"):
        # A side call (a title, a summary, a quota probe): answer it without spending a step.
        blocks: list[dict[str, Any]] = [{"type": "text", "text": "Fake title"}]
        stop = "end_turn"
    else:
        step = _play(fake, request)
        if isinstance(step, Fail):
            return _json(step.status, {"type": "error", "error": {
                "type": "api_error", "message": FAKE_MODEL_ERROR}})
        blocks, stop = _anthropic_blocks(fake, step, request)
    model = str(body.get("model") or fake.model)
    message_id = fake.next_id("msg")
    if not body.get("stream"):
        return _json(200, {"id": message_id, "type": "message", "role": "assistant",
                           "model": model, "content": blocks, "stop_reason": stop,
                           "stop_sequence": None, "usage": _anthropic_usage()})
    return _sse(_anthropic_events(message_id, model, blocks, stop))


def _anthropic_usage() -> dict[str, Any]:
    return {"input_tokens": 10, "output_tokens": 5, "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0}


def _anthropic_blocks(fake: FakeModel, step: Step,
                      request: Request) -> tuple[list[dict[str, Any]], str]:
    """The content blocks and stop reason for one step."""
    def use(name: str, tool_input: dict[str, Any]) -> dict[str, Any]:
        return {"type": "tool_use", "id": fake.next_id("toolu"), "name": name,
                "input": tool_input}

    if isinstance(step, Text):
        return [{"type": "text", "text": _fill(step.text, request)}], "end_turn"
    if isinstance(step, Tool):
        return [use(step.name, step.input)], "tool_use"
    if isinstance(step, Shell):
        return [use("Bash", {"command": step.command,
                             "description": f"Run {step.command}"})], "tool_use"
    if isinstance(step, WriteFile):
        return [use("Write", {"file_path": step.path, "content": step.content})], "tool_use"
    if isinstance(step, Todo):
        if step.completed:
            return [use("TaskUpdate", {"taskId": str(n), "status": "completed"})
                    for n in range(1, step.completed + 1)], "tool_use"
        return [use("TaskCreate", {"subject": item, "description": item,
                                   "activeForm": f"Doing: {item}"})
                for item in step.items], "tool_use"
    raise TypeError(f"not a model answer: {step!r}")


def _anthropic_events(message_id: str, model: str, blocks: list[dict[str, Any]],
                      stop: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The SSE events of one streamed message."""
    yield "message_start", {"type": "message_start", "message": {
        "id": message_id, "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": {**_anthropic_usage(), "output_tokens": 1}}}
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {"type": "text", "text": ""}}
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            yield "content_block_start", {"type": "content_block_start", "index": index,
                                          "content_block": {**block, "input": {}}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield "content_block_delta", {"type": "content_block_delta", "index": index,
                                      "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta",
                            "delta": {"stop_reason": stop, "stop_sequence": None},
                            "usage": {"output_tokens": 5}}
    yield "message_stop", {"type": "message_stop"}


# --- OpenAI Responses API -------------------------------------------------------------------


def _openai(fake: FakeModel, request: Request) -> Answer:
    """Answer `POST /v1/responses` (always streamed: Codex asks for nothing else)."""
    body = request.body
    request.history = len(body.get("input") or [])
    step = _play(fake, request)
    if isinstance(step, Fail):
        return _json(step.status, {"error": {"type": "server_error", "code": "server_error",
                                             "message": FAKE_MODEL_ERROR}})
    items = _openai_items(fake, step, request)
    response_id = fake.next_id("resp")
    model = str(body.get("model") or fake.model)
    return _sse(_openai_events(response_id, model, items))


def _openai_items(fake: FakeModel, step: Step, request: Request) -> list[dict[str, Any]]:
    """The output items for one step, in the shapes the request's tools call for."""
    tools = {tool.get("name"): tool for tool in request.body.get("tools") or []
             if isinstance(tool, dict)}

    def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"type": "function_call", "id": fake.next_id("fc"),
                "call_id": fake.next_id("call"), "name": name,
                "arguments": json.dumps(arguments), "status": "completed"}

    if isinstance(step, Text):
        text = _fill(step.text, request)
        return [{"type": "message", "id": fake.next_id("msg"), "role": "assistant",
                 "status": "completed",
                 "content": [{"type": "output_text", "text": text, "annotations": []}]}]
    if isinstance(step, Tool):
        return [call(step.name, step.input)]
    if isinstance(step, Shell):
        # Codex offers one of its shell tools, depending on version and features.
        if "exec_command" in tools:
            return [call("exec_command", {"cmd": step.command})]
        if "shell_command" in tools:
            return [call("shell_command", {"command": step.command})]
        return [call("shell", {"command": ["bash", "-lc", step.command]})]
    if isinstance(step, WriteFile):
        lines = "".join(f"+{line}\n" for line in step.content.splitlines())
        patch = f"*** Begin Patch\n*** Add File: {step.path}\n{lines}*** End Patch\n"
        if tools.get("apply_patch", {}).get("type") == "custom":
            return [{"type": "custom_tool_call", "id": fake.next_id("ctc"),
                     "call_id": fake.next_id("call"), "name": "apply_patch", "input": patch,
                     "status": "completed"}]
        return [call("apply_patch", {"input": patch})]
    if isinstance(step, Todo):
        plan = [{"step": item, "status": "completed" if n < step.completed
                 else "in_progress" if n == step.completed else "pending"}
                for n, item in enumerate(step.items)]
        return [call("update_plan", {"plan": plan})]
    raise TypeError(f"not a model answer: {step!r}")


def _openai_events(response_id: str, model: str,
                   items: list[dict[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """The SSE events of one streamed response."""
    sequence = itertools.count()
    base = {"id": response_id, "object": "response", "created_at": int(time.time()),
            "model": model}
    yield "response.created", {"type": "response.created", "sequence_number": next(sequence),
                               "response": {**base, "status": "in_progress", "output": []}}
    for index, item in enumerate(items):
        started = {**item, "status": "in_progress"}
        if item["type"] == "message":
            started["content"] = []
        yield "response.output_item.added", {"type": "response.output_item.added",
                                             "sequence_number": next(sequence),
                                             "output_index": index, "item": started}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield "response.output_text.delta", {
                "type": "response.output_text.delta", "sequence_number": next(sequence),
                "item_id": item["id"], "output_index": index, "content_index": 0,
                "delta": text}
        yield "response.output_item.done", {"type": "response.output_item.done",
                                            "sequence_number": next(sequence),
                                            "output_index": index, "item": item}
    usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
             "total_tokens": 15}
    yield "response.completed", {"type": "response.completed", "sequence_number": next(sequence),
                                 "response": {**base, "status": "completed", "output": items,
                                              "usage": usage}}

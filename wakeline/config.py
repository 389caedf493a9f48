"""The one typed configuration object, loaded from TOML.

Every key has a default, a unit in its name where it has one, and a
description; `docs/configuration.md` documents each (a test checks it). Paths
are relative to the directory of the config file (the working directory when
running on embedded defaults). Secrets are never inline: they come from files
or the environment, and only `Secrets` ever holds their values.
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from wakeline.errors import ConfigError
from wakeline.sandbox.hosts import parse_rule

DEFAULT_CONFIG_NAME = "wakeline.toml"
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
CONFIG_ENV = "WAKELINE_CONFIG"


class _Section(BaseModel):
    # Strict: TOML has real types, so "yes" for a bool or "8787" for a port is a mistake.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class ServerConfig(_Section):
    """Both HTTP listeners."""

    webhook_host: str = Field("0.0.0.0", description="Address of the public webhook listener.")
    webhook_port: int = Field(
        8787, ge=0, le=65535, description="Port of the public listener (0 picks a free one)."
    )
    operator_host: str = Field(
        "127.0.0.1", description="Address of the operator API; keep it on loopback."
    )
    operator_port: int = Field(
        8788, ge=0, le=65535, description="Port of the operator API (0 picks a free one)."
    )
    threads: int = Field(8, ge=1, le=256, description="Request threads of the operator API.")
    ingress_threads: int = Field(
        32, ge=1, le=1024, description="Request threads of the public webhook listener. Each one "
        "waits while its delivery's group is committed, so with fewer threads than concurrent "
        "senders deliveries queue in front of the commit instead of joining it.",
    )
    single_cpu: bool = Field(
        True, description="Run wakeline's own threads on one CPU, batch-scheduled (agents keep "
        "every CPU and the normal policy): with one GIL they never use more, and together their "
        "hand-offs are cheap.",
    )
    max_body_bytes: int = Field(
        1_048_576, ge=1024, le=64 * 1_048_576, description="Largest webhook body accepted."
    )
    admission_batch_max: int = Field(
        64, ge=1, le=1000, description="Most deliveries the admission writer commits at once."
    )
    admission_wait_seconds: float = Field(
        15.0, gt=0, le=120, description="How long a webhook request waits for its commit (503 after)."
    )


class LinearConfig(_Section):
    """Linear credentials, webhook checks and identity."""

    webhook_secret_file: str = Field(
        "var/secrets/linear-webhook-secret",
        description="File holding the webhook signing secret; $WAKELINE_LINEAR_WEBHOOK_SECRET wins.",
    )
    api_key_file: str = Field(
        "var/secrets/linear-api-key",
        description="File holding the Linear API key or app token; $WAKELINE_LINEAR_API_KEY wins. "
        "None means the local backend.",
    )
    client_id: str = Field(
        "", description="The Linear OAuth app's client id: set, wakeline installs the app "
        "(`wakeline linear install`) and refreshes its token itself; the app's token wins over "
        "the API key.",
    )
    client_secret_file: str = Field(
        "var/secrets/linear-client-secret",
        description="File holding the OAuth app's client secret; $WAKELINE_LINEAR_CLIENT_SECRET wins.",
    )
    oauth_url: str = Field(
        "https://api.linear.app/oauth/token", description="Linear's OAuth token endpoint."
    )
    grant: Literal["authorization_code", "client_credentials"] = Field(
        "authorization_code",
        description='"authorization_code": installed once with `wakeline linear install`, then '
        'refreshed; "client_credentials": the app\'s own 30-day token, fetched with the client id '
        "and secret and fetched again before it expires.",
    )
    api_url: str = Field("https://api.linear.app/graphql", description="Linear's GraphQL endpoint.")
    organization_id: str = Field(
        "", description="When set, deliveries of any other organization get 403."
    )
    freshness_seconds: int = Field(
        60, ge=1, le=3600, description="Largest distance between the signed timestamp and now."
    )
    echo_window_seconds: int = Field(
        90, ge=0, le=3600, description="How long ids named by our own writes count as echoes."
    )
    owner_user_ids: list[str] = Field(
        default_factory=list, description="Linear user ids that count as the owner."
    )
    owner_emails: list[str] = Field(
        default_factory=list, description="Emails that count as the owner."
    )
    requests_per_hour: int = Field(
        2500, ge=1, le=100_000,
        validation_alias=AliasChoices("requests_per_hour", "request_budget_per_hour"),
        description="wakeline's own budget of requests to Linear per sliding hour: past 80% "
        "progress is shed, at 100% final answers wait for the hour to roll on.",
    )
    max_concurrent_requests: int = Field(
        8, ge=1, le=64, description="Calls to Linear in flight at once."
    )
    uploads_url: str = Field(
        "https://uploads.linear.app", pattern=r"^https?://[^/?#\s]+(/[^?#\s]*)?$",
        description="Linear's file storage: a link under it (same scheme, host and port, and "
        "path prefix) in what a turn reads is fetched with the Linear credential into the "
        "workspace before the agent starts; no other link is ever fetched.",
    )


class InboxConfig(_Section):
    """The Linear inbox."""

    following: bool = Field(
        False, description="Initial value of the follow switch; the persisted runtime switch wins."
    )


class StoreConfig(_Section):
    """How long the store keeps what is finished (decision 0030)."""

    keep_days: float = Field(
        30.0, gt=0, le=3650, description="Receipts, completed FIFO deliveries, turn results and "
        "settled effects older than this are pruned (never what is pending, claimed, held or of "
        "unknown outcome, nor what an open conversation still needs).",
    )
    dedupe_hours: float = Field(
        24.0, gt=0, le=87_600, description="A receipt is kept at least this long whatever "
        "keep_days says, so a delivery Linear retries (for hours) is still answered `duplicate`.",
    )


def _agent_kind(value: str) -> str:
    """An `output` must name a kind of agent CLI wakeline knows (`agents.registry`)."""
    from wakeline.agents.registry import names  # the readers load only when a config does

    if value not in names():
        raise ValueError(f"expected one of {', '.join(repr(n) for n in names())}")
    return value


class AgentConfig(_Section):
    """The coding agent that turns run."""

    command: list[str] = Field(
        default_factory=lambda: ["python", "-m", "wakeline.agents.demo"],
        min_length=1,
        description="Argv of the agent; `python` here means wakeline's own interpreter.",
    )
    timeout_seconds: int = Field(3600, ge=1, description="A turn running longer is stopped.")
    heartbeat_seconds: int = Field(
        1500, ge=1, description="A turn running this long gets a heartbeat thought."
    )
    max_concurrent_turns: int = Field(4, ge=1, le=256, description="Turns running at once.")
    output: str = Field(
        "text", description='How stdout is read: "text" (the answer, exit code its kind), '
        '"claude" (Claude Code stream-json) or "codex" (codex exec --json): a kind of '
        "`wakeline.agents.registry`.",
    )

    @field_validator("output")
    @classmethod
    def _known_output(cls, value: str) -> str:
        return _agent_kind(value)
    progress: bool = Field(
        True, description="Mirror the agent's progress (tool calls, thoughts, plan, links) into "
        "its Linear agent session.",
    )
    progress_interval_seconds: float = Field(
        3.0, ge=0, le=3600, description="Per agent session, at most one progress write this often; "
        "final answers never wait for it.",
    )
    max_file_bytes: int = Field(
        20 * 1_048_576, ge=1, le=1024 * 1_048_576,
        description="Largest file fetched from `linear.uploads_url` for a turn; a larger one is "
        "named in the prompt as not fetched.",
    )
    max_files_per_turn: int = Field(
        20, ge=0, le=1000, description="Most files one turn fetches from `linear.uploads_url` "
        "(files already fetched for the conversation do not count); 0: none is fetched.",
    )
    file_timeout_seconds: float = Field(
        20.0, gt=0, le=600, description="A file from `linear.uploads_url` not fully fetched "
        "within this long is named in the prompt as not fetched.",
    )


class RepoConfig(_Section):
    """One repository of a route's `repos`: the issues its labels or projects choose."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9._-]{1,64}$",
                      description="The repository's name: what the person picks when asked, and "
                      "what `GET /v1/conversations/{id}` shows as `repo`. Unique in the route.")
    path: str = Field(..., min_length=1,
                      description="The git repository (its top-level directory), relative to the "
                      "config file: worktrees are made in it.")
    labels: list[str] = Field(default_factory=list,
                              description="Linear label names: an issue carrying one of them works "
                              "here (compared without case).")
    projects: list[str] = Field(default_factory=list,
                                description="Linear project ids: an issue no label placed, in one "
                                "of these projects, works here.")
    default_branch: str = Field("", description="Branch (or commit) new worktrees start from; "
                                "empty: the route's `default_branch`, else the repo's HEAD.")


class RouteConfig(_Section):
    """Which Linear teams (and projects) wake issue conversations, and how."""

    name: str = Field(..., min_length=1, description="A name for logs and the API.")
    teams: list[str] = Field(default_factory=list, description="Linear team keys served.")
    mode: Literal["agent", "issue"] = Field(
        "agent", description='"agent": agent sessions only; "issue": Issue/Comment events too.'
    )
    projects: list[str] = Field(
        default_factory=list, description='Project ids whose events wake turns (mode = "issue").'
    )
    repo: str = Field("", description="Optional git repository: one worktree per issue.")
    repos: list[RepoConfig] = Field(
        default_factory=list, description="Several repositories, one chosen per issue by its "
        "labels, else its project, else asked of the person (excludes `repo`).",
    )
    default_branch: str = Field(
        "", description="Branch (or commit) new worktrees start from; empty: the repo's HEAD."
    )
    command: list[str] | None = Field(
        None, description="Agent argv for this route; defaults to agent.command."
    )
    output: str | None = Field(
        None, description="How this route's agent output is read; defaults to agent.output."
    )
    done_state_id: str = Field("", description="Workflow state id of the managed Done state.")
    proposed_state_id: str = Field("", description="Workflow state id of the Agent Proposed state.")
    trust: Literal["private", "public"] = Field(
        "private", description='"public": turns are tainted (read-only Linear lane).'
    )
    reply: Literal["comment", "none"] = Field(
        "comment", description='mode = "issue": post the answer as a comment, or not.'
    )
    planning: bool = Field(
        False, description="Plan, approve, execute: no turn changes code before a person "
        "approved its plan, driven by the issue's workflow states (its Issue and Comment "
        "events are routed whatever the mode).",
    )
    approvers: list[str] = Field(
        default_factory=list, description="With planning: the Linear user ids who may approve a "
        "plan; empty: any person (never an app, never wakeline's own account).",
    )
    discord_channel_id: str = Field(
        "", pattern=r"^\d{0,25}$",
        description="Optional Discord text channel id: each issue conversation of the route gets "
        "one control thread under it (needs a [discord] token).",
    )
    network: Literal["open", "off", "allow"] = Field(
        "open", description='A confined turn\'s network: "open" the host\'s, "off" none at all, '
        '"allow" only `allow_hosts`, through wakeline\'s proxy. wakeline\'s own API is reachable '
        "in every mode.",
    )
    allow_hosts: list[Annotated[str, AfterValidator(parse_rule)]] = Field(
        default_factory=list, description='With network = "allow": the hosts a turn may reach, '
        '"host" (ports 80 and 443) or "host:port".',
    )
    home: str = Field(
        "", description="The agent's HOME inside the sandbox, kept between turns; empty: "
        "<state_dir>/homes/<route name>.",
    )
    writable: list[str] = Field(
        default_factory=list, description="More host paths this route's confined agents may "
        "write (a shared cache, say).",
    )

    @field_validator("output")
    @classmethod
    def _known_output(cls, value: str | None) -> str | None:
        return value if value is None else _agent_kind(value)

    def repo_named(self, name: str | None) -> RepoConfig | None:
        """The entry of `repos` with this name (None when there is none)."""
        return next((r for r in self.repos if r.name == name), None) if name else None

    @field_validator("allow_hosts")
    @classmethod
    def _allow_needs_allow(cls, hosts: list[str], info: ValidationInfo) -> list[str]:
        if hosts and info.data.get("network") != "allow":
            raise ValueError('allow_hosts needs network = "allow"')
        return hosts


MATRIX_ID = r"^@[^:\s]+:\S+$"
ROOM_ID = r"^!\S+$"  # room version 12 ids have no server part


class MatrixConnectionConfig(_Section):
    """One Matrix account (the owner identity) that wakeline acts as: `[matrix.connections.NAME]`."""

    homeserver: str = Field(..., pattern=r"^https?://\S+$",
                            description="The homeserver's client API base URL.")
    user_id: str = Field(..., pattern=MATRIX_ID,
                         description="The owner identity this connection acts as (`@me:example.org`).")
    access_token_file: str = Field(
        ..., min_length=1, description="File holding the account's access token (a secret, "
        "0600); it belongs to the device `device_id` and is never logged in again.")
    device_id: str = Field("WAKELINE", min_length=1, pattern=r"^\S+$",
                           description="The fixed device id the token was issued for; its "
                           "end-to-end keys live under `<state_dir>/matrix/<name>/`.")
    sync_timeout_seconds: float = Field(
        30.0, ge=0, le=300, description="Long-poll of one `/sync`: the homeserver answers as "
        "soon as something arrives, or after this long.")
    retry_max_seconds: float = Field(
        60.0, gt=0, le=3600, description="Longest wait between retries while the homeserver "
        "is down, slow, or a page waits for keys (the wait doubles from half a second).")
    stall_after_seconds: float = Field(
        300.0, gt=0, le=86_400, description="An undecryptable event that has held the cursor "
        "this long makes the connection `stalled` in status, doctor and the journal.")


class MatrixRouteConfig(_Section):
    """One exact room bound to one conversation: `[[matrix.routes]]`."""

    name: str = Field(..., min_length=1, description="A name for logs, approvals and the API; "
                      "unique among Matrix and Linear routes.")
    connection: str = Field(..., min_length=1,
                            description="The `[matrix.connections.NAME]` this route reads through.")
    room_id: str = Field(..., pattern=ROOM_ID,
                         description="The room (`!id:server`, not an alias) bound to the conversation.")
    activation: Literal["on_event", "on_demand"] = Field(
        "on_event", description='"on_event": new text from others wakes the conversation; '
        '"on_demand": it is recorded and the cursor advances, but nothing wakes.')
    bridge: str = Field("", pattern=r"^(@[^:\s]+:\S+)?$",
                        description="Optional Matrix user id of a bridge bot that must be "
                        "in the room (the route is switched off when it is not).")
    discord_channel_id: str = Field(
        "", pattern=r"^\d{0,25}$",
        description="Optional Discord text channel id: the room's conversation gets one control "
        "thread under it, where its proposed sends are approved or denied (needs a [discord] "
        "token).",
    )


class MatrixConfig(_Section):
    """Matrix connections and the routes that bind their rooms to conversations."""

    connections: dict[str, MatrixConnectionConfig] = Field(
        default_factory=dict, description="Accounts wakeline acts as, by name.")
    routes: list[MatrixRouteConfig] = Field(
        default_factory=list, description="Rooms bound to conversations.")

    @model_validator(mode="after")
    def _routes_name_known_connections(self) -> "MatrixConfig":
        names = [r.name for r in self.routes]
        if len(names) != len(set(names)):
            raise ValueError("Matrix route names must be unique")
        rooms = [(r.connection, r.room_id) for r in self.routes]
        if len(rooms) != len(set(rooms)):
            raise ValueError("a room is bound by at most one route of a connection")
        for route in self.routes:
            if route.connection not in self.connections:
                raise ValueError(f"route {route.name} names no configured connection "
                                 f"{route.connection!r}")
        return self


_SNOWFLAKE = r"^\d{1,25}$"


class DiscordConfig(_Section):
    """The Discord bot behind control threads; off without a token."""

    token_file: str = Field(
        "var/secrets/discord-bot-token",
        description="File holding the Discord bot token; $WAKELINE_DISCORD_TOKEN wins. No token: "
        "Discord is off.",
    )
    api_url: str = Field(
        "https://discord.com/api/v10",
        description="Discord's REST base; the Gateway address comes from "
        "GET {api_url}/gateway/bot.",
    )
    guild_id: str = Field(
        "", pattern=r"^\d{0,25}$",
        description="When set, only this guild's channels and messages count.",
    )
    allowed_user_ids: list[Annotated[str, Field(pattern=_SNOWFLAKE)]] = Field(
        default_factory=list,
        description="Discord user ids whose thread messages reach the agent; empty: anyone who "
        "can post in the parent channel.",
    )


class ScaleConfig(_Section):
    """Past one host: the scheduling engine and the database every host shares."""

    engine: Literal["local", "dbos"] = Field(
        "local", description='"local": one host, SQLite. "dbos": every host shares one PostgreSQL '
        "database and DBOS schedules the turns.",
    )
    database_url: str = Field(
        "", description='postgresql://... for engine "dbos": the store and the engine\'s tables '
        "live there. A password in it is a secret: env WAKELINE_DATABASE_URL wins over the file.",
    )
    host_id: str = Field("", description="This host's stable id; empty: the hostname.")
    host_timeout_seconds: int = Field(
        30, ge=2, le=3600, description="A host silent this long has its turns taken over by another.",
    )

    @field_validator("database_url")
    @classmethod
    def _postgres_url(cls, url: str) -> str:
        if url and not url.startswith(("postgresql://", "postgres://")):
            raise ValueError("must be a postgresql:// URL")
        return url


class SandboxConfig(_Section):
    """How turns are confined (bubblewrap)."""

    mode: Literal["auto", "required", "none"] = Field(
        "auto", description='"auto": confine every turn when bubblewrap works here, else run '
        'unconfined (public routes refuse their turns); "required": never run a turn unconfined '
        '(serve exits 2 when bubblewrap cannot run); "none": unconfined.',
    )
    bwrap: str = Field("bwrap", min_length=1,
                       description="The bubblewrap binary: a name on PATH or a path.")


def _default_routes() -> list[RouteConfig]:
    return [RouteConfig(name="default", teams=["ENG"])]


class ControlConfig(_Section):
    """The owner's control page (`GET /control` on the operator port, CONTRACT section 13)."""

    session_hours: float = Field(
        12.0, gt=0, le=720, description="How long a sign-in to the control page lasts; the "
        "page then asks for the operator token again.")


class Config(_Section):
    """The whole configuration. `base_dir` anchors every relative path."""

    state_dir: str = Field(
        "var", description="SQLite file, journal, tokens and workspaces; relative to the config."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log level of `wakeline serve`."
    )
    server: ServerConfig = Field(default_factory=ServerConfig, description="HTTP listeners.")
    linear: LinearConfig = Field(default_factory=LinearConfig, description="Linear.")
    inbox: InboxConfig = Field(default_factory=InboxConfig, description="The Linear inbox.")
    store: StoreConfig = Field(default_factory=StoreConfig,
                               description="How long finished work is kept.")
    agent: AgentConfig = Field(default_factory=AgentConfig, description="The agent.")
    discord: DiscordConfig = Field(
        default_factory=DiscordConfig, description="Discord control threads."
    )
    scale: ScaleConfig = Field(default_factory=ScaleConfig, description="Past one host.")
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig,
                                   description="How turns are confined.")
    control: ControlConfig = Field(default_factory=ControlConfig,
                                   description="The owner's control page.")
    routes: list[RouteConfig] = Field(
        default_factory=_default_routes, description="Routes; any [[routes]] replaces the default."
    )
    matrix: MatrixConfig = Field(default_factory=MatrixConfig,
                                 description="Matrix connections and routes (off when empty).")
    base_dir: Path = Field(Path("."), exclude=True, description="Directory of the config file.")
    source: Path | None = Field(None, exclude=True, description="The config file, when one was read.")

    @field_validator("routes")
    @classmethod
    def _unique_route_names(cls, routes: list[RouteConfig]) -> list[RouteConfig]:
        names = [r.name for r in routes]
        if len(names) != len(set(names)):
            raise ValueError("route names must be unique")
        return routes

    @model_validator(mode="after")
    def _matrix_route_names_are_not_linear(self) -> "Config":
        # A conversation keeps its route by name: one name must mean one route.
        clash = {r.name for r in self.routes} & {r.name for r in self.matrix.routes}
        if clash:
            raise ValueError(f"a Matrix route has the name of a [[routes]] entry: "
                             f"{', '.join(sorted(clash))}")
        return self

    def path(self, value: str) -> Path:
        """Resolve a configured path against the config file's directory."""
        p = Path(value).expanduser()
        return p if p.is_absolute() else (self.base_dir / p)

    @property
    def state_path(self) -> Path:
        """The state directory."""
        return self.path(self.state_dir)

    @property
    def database_path(self) -> Path:
        """The SQLite file."""
        return self.state_path / "wakeline.db"

    @property
    def journal_path(self) -> Path:
        """The owner's journal: `entries.jsonl` and `since.json`."""
        return self.state_path / "journal"

    @property
    def workspaces_path(self) -> Path:
        """Where conversations' workspaces (directories or git worktrees) live."""
        return self.state_path / "workspaces"

    @property
    def oauth_token_path(self) -> Path:
        """The Linear app's tokens (0600), written by `wakeline linear install` and refreshes."""
        return self.state_path / "secrets" / "linear-oauth.json"

    @property
    def operator_token_path(self) -> Path:
        """The operator token file (0600)."""
        return self.state_path / "operator.token"

    def route_home(self, route: RouteConfig) -> Path:
        """A confined agent's HOME: the route's `home`, else `<state_dir>/homes/<route name>`
        (a name that is not a plain file name is stood in for by its hash)."""
        if route.home:
            return self.path(route.home)
        name = route.name
        if not _PLAIN_NAME.match(name) or name in (".", ".."):
            name = "route-" + hashlib.sha256(name.encode("utf-8")).hexdigest()[:16]
        return self.state_path / "homes" / name

    def secret_files(self) -> list[tuple[str, Path]]:
        """(key, path) of every secret file this config names (each `*_file` key, whatever its
        section), then the operator token and the Linear app's token file."""
        found: list[tuple[str, Path]] = []

        def walk(model: BaseModel, prefix: str) -> None:
            for name in type(model).model_fields:
                value = getattr(model, name)
                if isinstance(value, BaseModel):
                    walk(value, f"{prefix}{name}.")
                elif isinstance(value, dict):
                    for key, item in value.items():
                        if isinstance(item, BaseModel):
                            walk(item, f"{prefix}{name}.{key}.")
                elif name.endswith("_file") and isinstance(value, str) and value:
                    found.append((prefix + name, self.path(value)))

        walk(self, "")
        return [*found, ("operator token", self.operator_token_path),
                ("linear app token", self.oauth_token_path)]

    def matrix_store_path(self, connection: str) -> Path:
        """A Matrix connection's end-to-end crypto store (nio's), under the state dir."""
        return self.state_path / "matrix" / connection

    def route(self, name: str | None) -> RouteConfig | None:
        """The route of this name."""
        return next((r for r in self.routes if r.name == name), None) if name else None

    def matrix_route(self, name: str | None) -> MatrixRouteConfig | None:
        """The Matrix route of this name."""
        return next((r for r in self.matrix.routes if r.name == name), None) if name else None

    def control_channel(self, route_name: str | None) -> str | None:
        """The Discord channel under which the route's conversations get their control thread
        (a Linear or a Matrix route), or None."""
        route = self.route(route_name) or self.matrix_route(route_name)
        return route.discord_channel_id or None if route is not None else None

    def agent_output(self, route_name: str | None) -> str:
        """How a route's agent output is read: its own `output`, else `agent.output`."""
        route = self.route(route_name)
        return (route.output if route and route.output else None) or self.agent.output

    def route_for_team(self, team_key: str | None) -> RouteConfig | None:
        """The first route that serves this Linear team key."""
        if not team_key:
            return None
        return next((r for r in self.routes if team_key in r.teams), None)


def config_path(explicit: str | os.PathLike[str] | None, environ: dict[str, str]) -> Path:
    """Where the config lives: `--config`, else $WAKELINE_CONFIG, else ./wakeline.toml."""
    if explicit:
        return Path(explicit)
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV])
    return Path(DEFAULT_CONFIG_NAME)


def load_config(path: Path, *, required: bool = False) -> Config:
    """Load and validate a config file; a missing file means the embedded defaults.

    Raises:
        ConfigError: naming the dotted key at fault and the reason.
    """
    base = path.parent.resolve()
    if not path.exists():
        if required:
            raise ConfigError(str(path), "no such file")
        return Config(base_dir=Path.cwd())
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(str(path), f"cannot read: {exc.__class__.__name__}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), f"not valid TOML: {exc}") from None
    for internal in ("base_dir", "source"):
        if internal in raw:
            raise ConfigError(internal, "unknown key")
    return parse_config(raw, base, source=path.resolve())


def parse_config(raw: dict[str, object], base_dir: Path, *, source: Path | None = None) -> Config:
    """Validate a config mapping (as read from TOML from `source`)."""
    try:
        config = Config.model_validate({**raw, "base_dir": base_dir, "source": source})
    except ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"]) or "(root)"
        reason = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        raise ConfigError(key, reason) from None
    check_route_repos(config)
    check_confined_paths(config)
    return config


def route_repos(config: Config) -> list[tuple[str, str, str]]:
    """(key, path, base branch) of every repository the routes name: a route's `repo`
    (`routes.N.repo`), each of its `repos` (`routes.N.repos.M.path`)."""
    found = []
    for index, route in enumerate(config.routes):
        if route.repo:
            found.append((f"routes.{index}.repo", route.repo, route.default_branch))
        found += [(f"routes.{index}.repos.{n}.path", entry.path,
                   entry.default_branch or route.default_branch)
                  for n, entry in enumerate(route.repos)]
    return found


def check_route_repos(config: Config) -> None:
    """A route has `repo` or `repos`, never both, and no two of its `repos` share a name
    (whether each path is a git repository is checked before `serve` starts anything).

    Raises:
        ConfigError: naming the key at fault.
    """
    for index, route in enumerate(config.routes):
        if route.repo and route.repos:
            raise ConfigError(f"routes.{index}.repos", "repo and repos exclude each other: "
                                                       "set one of them")
        seen: dict[str, int] = {}
        for n, entry in enumerate(route.repos):
            if entry.name in seen:
                raise ConfigError(f"routes.{index}.repos.{n}.name",
                                  f"{entry.name!r} is already the name of "
                                  f"routes.{index}.repos.{seen[entry.name]}")
            seen[entry.name] = n


def check_confined_paths(config: Config) -> None:
    """A route's `home` and `writable` paths are written by confined agents: none of them may
    hold or lie inside the state dir (but for the default homes under `<state_dir>/homes/`),
    and none may hold the config file or a secret file (CONTRACT section 12).

    Raises:
        ConfigError: naming the key at fault.
    """
    state = _real(config.state_path)
    guarded = [("the config file", _real(config.source))] if config.source else []
    guarded += [(key, _real(path)) for key, path in config.secret_files()]
    for index, route in enumerate(config.routes):
        paths = [(f"routes.{index}.writable.{n}", w) for n, w in enumerate(route.writable)]
        if route.home:
            paths.insert(0, (f"routes.{index}.home", route.home))
        for key, value in paths:
            path = _real(config.path(value))
            shared_homes = key.endswith(".home") and state / "homes" in path.parents
            if (_within(path, state) and not shared_homes) or _within(state, path):
                raise ConfigError(key, f"{path} overlaps the state dir {state}, which confined "
                                       "agents must never see")
            for what, secret in guarded:
                if _within(secret, path):
                    raise ConfigError(key, f"{path} holds {what} ({secret})")


def _real(path: Path) -> Path:
    """`path` made absolute with its symbolic links resolved (as far as it exists)."""
    return Path(os.path.realpath(path))


def _within(path: Path, parent: Path) -> bool:
    return path == parent or parent in path.parents

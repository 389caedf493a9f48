"""`wakeline init`: a commented config and fresh secrets, never overwriting."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from wakeline.config import load_config
from wakeline.secrets import create_secret_file, new_token

CONFIG_TEMPLATE = """\
# wakeline configuration. Every key is optional; see docs/configuration.md.
# Relative paths are relative to this file.

# SQLite database, journal, tokens and workspaces.
state_dir = "var"

[server]
webhook_host = "0.0.0.0"        # public ingress: POST /webhooks/linear, GET /healthz
webhook_port = 8787
operator_host = "127.0.0.1"     # operator API: keep it on loopback
operator_port = 8788
threads = 8                     # the operator API's request threads
ingress_threads = 32            # the webhook listener's: each waits for its delivery's commit
single_cpu = true               # wakeline's own threads on one CPU, batch-scheduled; agents keep every CPU
max_body_bytes = 1048576

[linear]
# Secrets live in files (mode 0600) or the environment, never here.
webhook_secret_file = "var/secrets/linear-webhook-secret"  # $WAKELINE_LINEAR_WEBHOOK_SECRET wins
api_key_file = "var/secrets/linear-api-key"                # $WAKELINE_LINEAR_API_KEY wins
client_id = ""                  # your Linear OAuth app's id: then `wakeline linear install`
client_secret_file = "var/secrets/linear-client-secret"    # $WAKELINE_LINEAR_CLIENT_SECRET wins
oauth_url = "https://api.linear.app/oauth/token"
grant = "authorization_code"    # or "client_credentials": the app's own 30-day token, no browser
api_url = "https://api.linear.app/graphql"
organization_id = ""            # set it: deliveries of other organizations get 403
freshness_seconds = 60
echo_window_seconds = 90
owner_user_ids = []             # your Linear user id: the journal shows your comments as the owner's
owner_emails = []

[inbox]
following = false               # initial value; `wakeline follow on|off` persists and wins

[store]
keep_days = 30                  # finished work older than this is pruned (fractions allowed)
dedupe_hours = 24               # receipts stay at least this long: Linear retries for hours

[agent]
# Any CLI that reads the prompt on stdin; exit 0 answer, 1 error, 2 question.
command = ["python", "-m", "wakeline.agents.demo"]
timeout_seconds = 3600
heartbeat_seconds = 1500
max_concurrent_turns = 4

[discord]
# Control threads (docs/operations.md): off without a bot token; needs the `discord` extra.
token_file = "var/secrets/discord-bot-token"   # $WAKELINE_DISCORD_TOKEN wins
api_url = "https://discord.com/api/v10"
guild_id = ""                   # set it: only this server's channels and messages count
allowed_user_ids = []           # Discord user ids who may talk to the agent; empty: anyone there

[[routes]]
name = "default"
teams = ["ENG"]                 # Linear team keys this route serves
mode = "agent"                  # "agent" or "issue"
projects = []
repo = ""                       # a git repository: one worktree per issue conversation
default_branch = ""             # where new worktrees start (empty: the repository's HEAD)
done_state_id = ""              # the Done state's id: closing there counts as completed
proposed_state_id = ""
trust = "private"               # "public": read-only Linear lane for its turns
reply = "comment"
discord_channel_id = ""         # a Discord channel id: one control thread per issue under it
"""


@dataclass
class InitReport:
    """What `init` created (True) or found already there (False)."""

    config: tuple[Path, bool]
    webhook_secret: tuple[Path, bool]
    operator_token: tuple[Path, bool]


def init_project(config_path: Path) -> InitReport:
    """Write the config (unless present), then the webhook secret and operator token."""
    config_created = False
    if not config_path.exists():
        config_path.parent.mkdir(parents=True, exist_ok=True)
        config_path.write_text(CONFIG_TEMPLATE, encoding="utf-8")
        config_created = True
    config = load_config(config_path, required=True)
    config.state_path.mkdir(parents=True, exist_ok=True, mode=0o700)
    secret_path = config.path(config.linear.webhook_secret_file)
    return InitReport(
        config=(config_path, config_created),
        webhook_secret=(secret_path, create_secret_file(secret_path, new_token())),
        operator_token=(config.operator_token_path, create_secret_file(config.operator_token_path, new_token())),
    )

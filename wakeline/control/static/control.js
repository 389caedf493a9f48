// The control page's live parts (CONTRACT section 13). The server renders everything; this
// script follows GET /v1/events and, when something changed, swaps in the board the server
// renders again (/control/board), so a state shows only once the server reports it. Progress
// items it adds itself, as text, in the markup of templates/items.html. Buttons post to the
// operator API with the header that marks a request as the page's own.
(() => {
  "use strict";
  const $ = (id) => document.getElementById(id);
  if (!$("board")) return; // the sign-in form: a plain form post, no script needed

  let selected = $("board").dataset.conversation;
  let recent = []; // progress of the selected conversation, replayed after a swap
  let feed = null;
  let timer = null;
  let loading = false;
  let again = false;

  const say = (text) => { $("notice").textContent = text; };

  async function reason(resp) {
    try {
      const body = await resp.json();
      return `${body.detail || body.error} (${resp.status})`;
    } catch (err) {
      return `the server answered ${resp.status}`;
    }
  }

  function connect(after) {
    feed = new EventSource("/v1/events?after=" + encodeURIComponent(after));
    for (const kind of ["conversation", "waiting", "refresh"]) {
      feed.addEventListener(kind, refreshSoon);
    }
    feed.addEventListener("progress", (e) => {
      const change = JSON.parse(e.data);
      if (change.conversation !== selected) return;
      change.seq = Number(e.lastEventId);
      recent.push(change);
      if (recent.length > 500) recent.shift();
      apply(change);
    });
    feed.onerror = () => {
      if (feed.readyState === EventSource.CLOSED) setTimeout(reopen, 2000); // a refusal
    };
  }

  async function reopen() {
    await refresh(); // a 401 here shows the sign-in form
    connect($("board").dataset.seq);
  }

  function refreshSoon() {
    clearTimeout(timer);
    timer = setTimeout(refresh, 50);
  }

  async function refresh() {
    if (loading) { again = true; return; }
    loading = true;
    try {
      const resp = await fetch("/control/board?conversation=" + encodeURIComponent(selected),
                               {credentials: "same-origin", cache: "no-store"});
      if (resp.status === 401) { location.assign("/control"); return; }
      if (!resp.ok) { say(await reason(resp)); return; }
      const next = new DOMParser().parseFromString(await resp.text(), "text/html")
        .getElementById("board");
      $("board").replaceWith(next);
      // What came while the board was read, where the new board does not have it yet.
      recent = recent.filter((change) => change.turn === $("progress").dataset.turn);
      recent.forEach((change) => apply(change, false));
    } catch (err) {
      say("The server cannot be reached: " + err.message);
    } finally {
      loading = false;
      if (again) { again = false; refreshSoon(); }
    }
  }

  function apply(change, live = true) {
    const list = $("progress");
    if (list.dataset.turn !== change.turn) {
      if (live) refreshSoon(); // a turn the board does not show yet
      return;
    }
    for (const item of change.items) {
      if (item.type === "plan") {
        const plan = $("plan");
        if (change.seq <= Number(plan.dataset.seq)) continue;
        plan.replaceChildren(...item.steps.map((step) => {
          const li = document.createElement("li");
          li.dataset.status = step.status;
          li.textContent = step.content;
          return li;
        }));
        plan.dataset.seq = change.seq;
        continue;
      }
      if (change.seq <= Number(list.dataset.seq)) continue;
      let li = item.call ? list.querySelector(`li[data-call="${CSS.escape(item.call)}"]`) : null;
      if (!li) { li = document.createElement("li"); list.append(li); }
      fill(li, item, change.seq);
    }
    list.dataset.seq = Math.max(Number(list.dataset.seq), change.seq);
  }

  function fill(li, item, seq) {
    const part = (tag, cls, text) => {
      const el = document.createElement(tag);
      if (cls) el.className = cls;
      el.textContent = text;
      return el;
    };
    li.className = `item ${item.type}` + (item.error ? " failed" : "");
    li.dataset.seq = seq;
    if (item.call) li.dataset.call = item.call;
    if (item.type === "action") {
      li.replaceChildren(part("span", "kind", "tool"), " ", part("code", "tool", item.tool), " ",
                         part("span", "parameter", item.parameter));
      if ("result" in item) li.append(part("pre", "result", item.result));
    } else if (item.type === "thought") {
      li.replaceChildren(part("span", "kind", "thought"), " ", part("span", "text", item.text));
    } else if (item.type === "link") {
      const a = part("a", "", item.label);
      a.href = item.url;
      a.rel = "noreferrer noopener";
      a.target = "_blank";
      li.replaceChildren(part("span", "kind", "link"), " ", a);
    }
  }

  async function act(button) {
    button.disabled = true;
    const body = button.dataset.bodySha256 ? {bodySha256: button.dataset.bodySha256} : {};
    try {
      const resp = await fetch(button.dataset.post, {
        method: "POST", credentials: "same-origin", cache: "no-store", body: JSON.stringify(body),
        headers: {"Content-Type": "application/json", "X-Wakeline-Action": "1"}});
      if (resp.status === 401) { location.assign("/control"); return; }
      say(resp.ok ? `${button.dataset.label}: asked. The state shown is the server's.`
                  : `${button.dataset.label} refused: ${await reason(resp)}`);
    } catch (err) {
      say("The server cannot be reached: " + err.message);
    } finally {
      button.disabled = false;
      refreshSoon();
    }
  }

  function select(id) {
    selected = id;
    recent = [];
    history.pushState(null, "", "/control?conversation=" + encodeURIComponent(id));
    refresh();
  }

  document.addEventListener("click", (e) => {
    const button = e.target.closest("button[data-post]");
    const link = e.target.closest("a[data-select]");
    if (button) { e.preventDefault(); act(button); }
    else if (link && !e.ctrlKey && !e.metaKey && !e.shiftKey) {
      e.preventDefault();
      select(link.dataset.select);
    }
  });
  window.addEventListener("popstate", () => {
    selected = new URLSearchParams(location.search).get("conversation") || "";
    recent = [];
    refresh();
  });
  $("sign-out").addEventListener("submit", async (e) => {
    e.preventDefault();
    feed.close();
    await fetch("/control/session/end", {method: "POST", credentials: "same-origin",
                                         headers: {"X-Wakeline-Action": "1"}});
    location.assign("/control");
  });
  window.addEventListener("pagehide", () => feed.close());

  connect($("board").dataset.seq);
})();

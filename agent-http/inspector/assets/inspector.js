// The run inspector's one script: live sections over server-sent events, and actions
// through the JSON API with a bearer token kept in this tab (sessionStorage).
"use strict";
(function () {
  const KEY = "durable-agents-token";
  const body = document.body;
  const root = body.dataset.root || "../";
  const base = new URL(root, location.href);
  const api = (path) => new URL(path, base).toString();
  const $ = (id) => document.getElementById(id);

  function token() { return sessionStorage.getItem(KEY) || ""; }
  function showTokenState() {
    const el = $("token-state");
    if (el) el.textContent = token() ? "token set (this tab)" : "no token";
    const b = $("token-button");
    if (b) b.textContent = token() ? "Change token" : "Set token";
  }
  function say(text, bad) {
    const el = $("action-result");
    el.textContent = text;
    el.className = bad ? "err" : "";
    clearTimeout(say.t);
    say.t = setTimeout(() => { el.textContent = ""; }, 8000);
  }

  // Ask with a <dialog>; resolves to the form's returnValue.
  function ask(dialog, prepare) {
    return new Promise((resolve) => {
      prepare && prepare();
      const opener = document.activeElement;
      dialog.returnValue = "";
      dialog.addEventListener("close", function done() {
        dialog.removeEventListener("close", done);
        if (opener && opener.focus && document.contains(opener)) opener.focus();
        resolve(dialog.returnValue);
      });
      dialog.showModal();
    });
  }
  async function askToken() {
    const input = $("token-input");
    const answer = await ask($("token-dialog"), () => { input.value = token(); setTimeout(() => input.focus(), 0); });
    if (answer === "ok") {
      if (input.value) sessionStorage.setItem(KEY, input.value); else sessionStorage.removeItem(KEY);
    }
    showTokenState();
    return token();
  }
  function confirmAction(text) {
    const reason = $("confirm-reason");
    return ask($("confirm-dialog"), () => { $("confirm-text").textContent = text; reason.value = ""; })
      .then((v) => (v === "yes" ? { ok: true, reason: reason.value } : { ok: false }));
  }

  // POST to the API with the token (asked for once); the answer as JSON.
  function post(path, payload) { return send("POST", path, payload); }
  // A request to the API with the token (asked for once): { ok, status, body, message },
  // or null when there is no token. Says nothing: the caller shows the outcome.
  async function call(method, path, payload) {
    let t = token();
    if (!t) t = await askToken();
    if (!t) return null;
    const init = { method: method, headers: { Authorization: "Bearer " + t } };
    if (payload !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(payload);
    }
    let resp;
    try { resp = await fetch(api(path), init); }
    catch (e) { return { ok: false, status: 0, body: null, message: "no answer: " + e.message }; }
    let answer = null;
    try { answer = await resp.json(); } catch (_) { answer = null; }
    if (!resp.ok) {
      if (resp.status === 401 || resp.status === 403) { sessionStorage.removeItem(KEY); showTokenState(); }
      const msg = answer && answer.error ? answer.error.message : resp.statusText;
      return { ok: false, status: resp.status, body: answer, message: msg };
    }
    // A success without a body (204) is still a success.
    return { ok: true, status: resp.status, body: answer === null ? {} : answer, message: "" };
  }
  // `call`, the refusal shown; the answer, or null.
  async function send(method, path, payload) {
    const r = await call(method, path, payload);
    if (!r) { say("No token: actions need the API's token.", true); return null; }
    if (!r.ok) { say("Refused (" + r.status + "): " + r.message, true); return null; }
    return r.body;
  }
  const enc = encodeURIComponent;

  document.addEventListener("click", async (ev) => {
    const b = ev.target.closest("[data-action]");
    if (!b) return;
    const action = b.dataset.action;
    if (action === "token") { askToken(); return; }
    if (action === "cancel" || action === "retry") {
      const run = b.dataset.run;
      const c = await confirmAction(action === "cancel"
        ? "Cancel run " + run + "? Its compensations run and it ends cancelled."
        : "Retry run " + run + "? It goes back to a worker.");
      if (!c.ok) { say("Nothing done."); return; }
      const payload = action === "cancel" ? { by: "inspector", reason: c.reason || "cancelled from the inspector" } : undefined;
      const r = await post("v1/runs/" + enc(run) + "/" + action, payload);
      if (r) { say(action === "cancel" ? "Cancel sent: the run is " + r.status + "." : "Retry sent: the run is " + r.status + "."); refresh(); }
      return;
    }
    if (action === "fork") {
      const run = b.dataset.run;
      const version = Number(b.dataset.version);
      const c = await confirmAction("Fork run " + run + " at version " + version + "? A new run starts from the state at that version; this run is not changed.");
      if (!c.ok) { say("Nothing done."); return; }
      const r = await post("v1/runs/" + enc(run) + "/fork", { version: version });
      if (r) {
        say("Forked into run " + r.id + " (" + r.status + ").");
        const link = $("fork-result");
        if (link) { link.href = root + "ui/runs/" + enc(r.id); link.textContent = "Open run " + r.id; link.hidden = false; }
      }
      return;
    }
    if (action === "schedule") {
      const id = b.dataset.schedule, op = b.dataset.op;
      const what = {
        pause: "Pause schedule " + id + "? No tick starts a run until it is resumed.",
        resume: "Resume schedule " + id + "? It ticks from its next tick; the paused ones start nothing.",
        trigger: "Start a run of schedule " + id + " now, whatever its overlap policy?",
        delete: "Delete schedule " + id + "? Its runs stay.",
      }[op];
      if (!what) return;
      const c = await confirmAction(what);
      if (!c.ok) { say("Nothing done."); return; }
      const r = op === "delete"
        ? await send("DELETE", "v1/schedules/" + enc(id))
        : await post("v1/schedules/" + enc(id) + "/" + op);
      if (r) {
        say(op === "delete" ? "Schedule " + id + " deleted." : op === "trigger"
          ? "Asked: a worker of " + r.agent + " starts the run at its next pass."
          : "Schedule " + id + " is " + (r.paused ? "paused" : "active") + ".");
        setTimeout(() => location.reload(), 600);
      }
      return;
    }
    if (action === "tool") {
      const tool = b.dataset.tool;
      const enable = b.dataset.enable === "true";
      const c = await confirmAction((enable ? "Switch tool " + tool + " on" : "Switch tool " + tool + " off") + " for every run?");
      if (!c.ok) { say("Nothing done."); return; }
      const r = await post("v1/tools/" + enc(tool) + "/" + (enable ? "enable" : "disable"), c.reason ? { reason: c.reason } : {});
      if (r) { say("Tool " + r.tool + " is " + (r.enabled ? "on" : "off") + "."); setTimeout(() => location.reload(), 600); }
    }
  });

  // The values of the controls built from a schema (fields.html) within `box`: one key
  // each, typed by its control; null (and the control focused) when a JSON one is not JSON.
  function collect(box) {
    const out = {};
    for (const el of box.querySelectorAll("[data-key]")) {
      const key = el.dataset.key, control = el.dataset.control;
      if (control === "boolean") { out[key] = el.checked; continue; }
      if (el.value === "") continue;
      if (control === "integer" || control === "number") { out[key] = Number(el.value); continue; }
      if (control === "json") {
        try { out[key] = JSON.parse(el.value); }
        catch (e) { say(key + " is not JSON: " + e.message, true); el.focus(); return null; }
        continue;
      }
      out[key] = el.value;
    }
    return out;
  }

  // The start form shows the fields of the initial state chosen; the others are disabled
  // (their required fields do not hold the form back).
  document.addEventListener("change", (ev) => {
    if (ev.target.id === "start-state") {
      for (const fs of document.querySelectorAll("#start-form .start-fields")) {
        const shown = fs.dataset.state === ev.target.value;
        fs.hidden = !shown; fs.disabled = !shown;
      }
    }
    if (ev.target.id === "batch-action") $("batch-signal").hidden = ev.target.value !== "signal";
  });

  function labelsOf(text) {
    const labels = {};
    for (const pair of text.split(",").map((p) => p.trim()).filter(Boolean)) {
      const at = pair.indexOf("=");
      if (at < 1) return null;
      labels[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
    }
    return labels;
  }

  // Start a run of the agent: its state as serde writes the enum ({"Start": {...}}).
  async function startRun(form) {
    const out = $("start-result");
    const name = $("start-state").value;
    const fs = Array.from(form.querySelectorAll(".start-fields")).find((f) => f.dataset.state === name);
    let state;
    if (!fs || fs.dataset.shape === "unit") state = name;
    else if (fs.dataset.shape === "json") {
      const box = fs.querySelector("[data-whole]");
      try { state = { [name]: JSON.parse(box.value) }; }
      catch (e) { out.textContent = "✗ The data is not JSON: " + e.message; out.className = "err"; box.focus(); return; }
    } else {
      const fields = collect(fs);
      if (!fields) return;
      state = { [name]: fields };
    }
    const labels = labelsOf($("start-labels").value);
    if (!labels) { out.textContent = "✗ Labels are key=value pairs, comma-separated."; out.className = "err"; $("start-labels").focus(); return; }
    const body = { state: state, labels: labels };
    const id = $("start-id").value.trim();
    if (id) body.id = id;
    out.textContent = "Starting…"; out.className = "";
    const r = await call("POST", "v1/agents/" + enc(form.dataset.agent) + "/runs", body);
    if (!r) { out.textContent = "✗ No token: starting a run needs the API's token."; out.className = "err"; return; }
    if (!r.ok) { out.textContent = "✗ Refused (" + r.status + "): " + r.message; out.className = "err"; return; }
    const run = r.body.run;
    out.textContent = (r.body.created ? "✓ Started run " : "✓ The run existed, started the same way: ") + run.id + " (" + run.status + "). ";
    out.className = "ok";
    const a = document.createElement("a");
    a.id = "start-link"; a.href = root + "ui/runs/" + enc(run.id); a.textContent = "Open run " + run.id;
    out.appendChild(a);
  }

  // The runs the page's filters match, every page, up to `max` + 1 (to tell "too many").
  async function matching(form, max) {
    const ids = [];
    let cursor = null;
    const t = token();
    do {
      const q = (form.dataset.query ? form.dataset.query + "&" : "") + "limit=" + Math.min(max + 1, 500) + (cursor ? "&cursor=" + enc(cursor) : "");
      const resp = await fetch(api("v1/runs?" + q), { headers: t ? { Authorization: "Bearer " + t } : {} });
      let page = null;
      try { page = await resp.json(); } catch (_) { page = null; }
      if (!resp.ok) throw new Error("listing the runs was refused (" + resp.status + "): " + (page && page.error ? page.error.message : resp.statusText));
      for (const r of page.runs) ids.push(r.id);
      cursor = page.next || null;
    } while (cursor && ids.length <= max);
    return ids;
  }

  // One action on each of `ids`, a few at a time; every answer kept, refusals too.
  async function batch(form) {
    const action = $("batch-action").value;
    const max = Number(form.dataset.max);
    const summary = $("batch-summary"), table = $("batch-results"), rows = table.querySelector("tbody");
    let payload = undefined, signal = null;
    if (action === "signal") {
      signal = $("batch-signal-name").value.trim();
      if (!signal) { say("Name the signal to send.", true); $("batch-signal-name").focus(); return; }
      try { payload = JSON.parse($("batch-payload").value || "null"); }
      catch (e) { say("The payload is not JSON: " + e.message, true); $("batch-payload").focus(); return; }
    }
    let ids;
    summary.textContent = "Listing the matching runs…"; summary.className = "";
    try { ids = await matching(form, max); }
    catch (e) { summary.textContent = "✗ " + e.message; summary.className = "err"; return; }
    if (ids.length === 0) { summary.textContent = "No run matches these filters: nothing to do."; return; }
    if (ids.length > max) {
      summary.textContent = "✗ More than " + max + " runs match (" + form.dataset.filters + "); a batch acts on at most " + max + ": narrow the filters.";
      summary.className = "err"; return;
    }
    summary.textContent = "";
    const verb = { cancel: "Cancel", retry: "Retry", signal: "Send the signal " + signal + " to" }[action];
    const n = ids.length + (ids.length === 1 ? " run" : " runs");
    const c = await confirmAction(verb + " " + n + " matching these filters (" + form.dataset.filters + ")? Each run answers for itself: those that refuse are listed.");
    if (!c.ok) { say("Nothing done."); return; }
    if (!token() && !(await askToken())) { say("No token: actions need the API's token.", true); return; }
    rows.textContent = ""; table.hidden = false;
    const results = new Map();
    let done = 0, refused = 0, next = 0;
    summary.textContent = verb + " " + n + ": 0 of " + ids.length + " answered…";
    const one = async (id) => {
      // A token refused once (401, 403) is forgotten: the rest are not sent, nor asked again.
      if (!token()) { results.set(id, { ok: false, status: 0, message: "not sent: the token was refused" }); refused++; return; }
      const path = "v1/runs/" + enc(id) + "/" + (action === "signal" ? "signals" : action);
      const body = action === "cancel" ? { by: "inspector", reason: c.reason || "cancelled from the inspector (batch)" }
        : action === "signal" ? { name: signal, payload: payload } : undefined;
      const r = (await call("POST", path, body)) || { ok: false, status: 0, message: "not sent: no token" };
      results.set(id, r);
      if (r && r.ok) done++; else refused++;
      summary.textContent = verb + " " + n + ": " + (done + refused) + " of " + ids.length + " answered…";
    };
    const workers = Array.from({ length: Math.min(4, ids.length) }, async () => {
      while (next < ids.length) { const id = ids[next++]; await one(id); }
    });
    await Promise.all(workers);
    for (const id of ids) {
      const r = results.get(id);
      const tr = document.createElement("tr");
      tr.dataset.run = id;
      tr.dataset.outcome = r.ok ? "done" : "refused";
      const cell = (text) => { const td = document.createElement("td"); td.textContent = text; tr.appendChild(td); return td; };
      const link = document.createElement("a");
      link.href = root + "ui/runs/" + enc(id); link.textContent = id;
      cell("").appendChild(link);
      cell(r.ok ? "✓ done" : "✗ refused" + (r.status ? " (" + r.status + ")" : "")).className = r.ok ? "ok" : "err";
      cell(r.ok ? (action === "signal" ? "signal " + r.body.id + " sent" : "now " + r.body.status) : r.message);
      rows.appendChild(tr);
    }
    summary.textContent = verb + " " + n + ": " + done + " done, " + refused + " refused.";
    summary.className = refused ? "err" : "ok";
    refresh();
  }

  document.addEventListener("submit", async (ev) => {
    const form = ev.target;
    if (form.id === "schedule-form") { ev.preventDefault(); createSchedule(); return; }
    if (form.id === "start-form") { ev.preventDefault(); startRun(form); return; }
    if (form.id === "batch-form") { ev.preventDefault(); batch(form); return; }
    if (form.id !== "signal-form") return;
    ev.preventDefault();
    let payload;
    if (form.dataset.fields) {
      payload = collect(form);
      if (!payload) return;
    } else {
      try { payload = JSON.parse($("signal-payload").value || "null"); }
      catch (e) { say("The payload is not JSON: " + e.message, true); $("signal-payload").focus(); return; }
    }
    const name = $("signal-name").value;
    const r = await post("v1/runs/" + enc(form.dataset.run) + "/signals", { name: name, payload: payload });
    if (r) say("Signal " + name + " sent (id " + r.id + "); the run moves when a worker consumes it.");
  });

  // The new schedule's form: a cron expression in its zone, or an interval in seconds.
  async function createSchedule() {
    const cron = $("schedule-cron").value.trim(), every = $("schedule-every").value;
    if ((cron === "") === (every === "")) { say("Give a cron expression or an interval, one of the two.", true); return; }
    let state;
    try { state = JSON.parse($("schedule-state").value); }
    catch (e) { say("The initial state is not JSON: " + e.message, true); $("schedule-state").focus(); return; }
    const spec = cron !== ""
      ? { cron: { expression: cron, time_zone: $("schedule-tz").value.trim() || "UTC" } }
      : { interval: { every_ms: Math.round(Number(every) * 1000) } };
    const body = { id: $("schedule-id").value.trim(), agent: $("schedule-agent").value, spec: spec, initial_state: state };
    const r = await post("v1/schedules", body);
    if (r) { say("Schedule " + r.id + " created."); setTimeout(() => location.reload(), 600); }
  }

  const login = $("login-form");
  if (login) login.addEventListener("submit", () => { sessionStorage.setItem(KEY, $("login-token").value); });

  // Live sections: fetch the page's moving part again, at most every 300 ms.
  let pending = null;
  function refresh() {
    if (pending) return;
    pending = setTimeout(async () => {
      pending = null;
      const page = body.dataset.page;
      let url, target;
      if (page === "run") { const q = new URLSearchParams(location.search); q.set("fragment", "live"); url = "?" + q.toString(); target = $("run-live"); }
      else if (page === "runs") { const q = body.dataset.query; url = "?" + (q ? q + "&" : "") + "fragment=rows"; target = $("runs-live"); }
      else return;
      // Never replace a form someone is typing in; try again a little later.
      const active = document.activeElement;
      if (active && target.contains(active) && (active.tagName === "TEXTAREA" || active.tagName === "INPUT")) { setTimeout(refresh, 1000); return; }
      const resp = await fetch(url, { headers: { Accept: "text/html" } });
      if (!resp.ok) return;
      const open = Array.from(target.querySelectorAll("details[open]")).map((d) => d.parentElement && d.parentElement.id).filter(Boolean);
      target.innerHTML = await resp.text();
      open.forEach((id) => { const li = document.getElementById(id); const d = li && li.querySelector("details"); if (d) d.open = true; });
    }, 300);
  }

  const TYPES = ["run_created", "transition_committed", "tool_started", "tool_finished", "decision_asked",
    "decision_accepted", "decision_rejected", "compensation_started", "compensation_finished",
    "children_starting", "children_started", "signal_received", "signal_consumed", "wait_entered",
    "status_set", "run_finished"];
  function describe(e) {
    switch (e.type) {
      case "transition_committed": return "v" + e.version + " " + e.kind + ": " + e.from + " → " + e.to + " (" + e.status + ")";
      case "tool_started": return "tool " + e.tool + " started (v" + e.version + "." + e.call + ")";
      case "tool_finished": return "tool " + e.tool + " " + e.status + " after " + e.attempts + " attempt(s), " + e.duration_ms + " ms" + (e.error_code ? " (" + e.error_code + ")" : "");
      case "decision_asked": return "decision asked among " + (e.options || []).join(", ");
      case "decision_accepted": return "decision accepted" + (e.transition ? ": → " + e.transition : "") + (e.tools && e.tools.length ? ": tools " + e.tools.join(", ") : "");
      case "decision_rejected": return "decision rejected" + (e.code ? ": " + e.code : "");
      case "signal_received": return "signal " + (e.name || "") + " received";
      case "signal_consumed": return "signal " + (e.name || "") + " consumed";
      case "wait_entered": return "waits for " + (e.signal || e.waiting_for || "a signal");
      case "run_finished": return "run finished: " + e.status;
      default: return e.type.replace(/_/g, " ");
    }
  }
  function follow(url, onEvent) {
    const state = $("live-state");
    // The page says "off" until this script runs: without JavaScript, nothing follows.
    if (state) state.textContent = "live updates: connecting…";
    const es = new EventSource(url);
    es.onopen = () => { if (state) state.textContent = "live updates: on"; };
    es.onerror = () => { if (state) state.textContent = "live updates: reconnecting…"; };
    TYPES.forEach((t) => es.addEventListener(t, (m) => { let e; try { e = JSON.parse(m.data); } catch (_) { return; } onEvent(e); }));
    // A page left for another may be kept (the back-forward cache) with its stream open:
    // a few of those hold every connection the browser allows this server, and the next
    // page waits for one. Close the stream on leaving; a page shown again from the cache
    // is reloaded, stream and all.
    window.addEventListener("pagehide", () => es.close());
    return es;
  }

  const page = body.dataset.page;
  if (page === "runs" && body.dataset.first === "true") {
    follow(api("ui/stream/events?after=" + enc(body.dataset.head || "0")), () => refresh());
  }
  if (page === "run") {
    const feed = $("feed");
    const tokens = $("tokens"), tokensBox = $("tokens-box");
    const es = follow(api("ui/stream/runs/" + enc(body.dataset.run) + "?after=" + enc(body.dataset.head || "0")), (e) => {
      const li = document.createElement("li");
      li.textContent = (e.at ? new Date(e.at).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") + " · " : "") + describe(e);
      feed.prepend(li);
      if (e.type === "decision_accepted" || e.type === "decision_rejected" || e.type === "transition_committed") {
        tokensBox.hidden = true; tokens.textContent = "";
      }
      refresh();
    });
    es.addEventListener("token", (m) => {
      let e; try { e = JSON.parse(m.data); } catch (_) { return; }
      tokensBox.hidden = false;
      $("tokens-title").textContent = "Model writing… (v" + e.version + "." + e.call + ")";
      tokens.textContent += e.text || "";
    });
  }
  window.addEventListener("pageshow", (ev) => { if (ev.persisted && page && (page === "run" || page === "runs")) location.reload(); });
  showTokenState();

  // ---- The edit page (/ui/runs/{id}/edit): a stopped run's state, edited. ----
  // The change is a JSON Patch computed here between the state as served (the text box's
  // default value) and as edited: the preview shows exactly the operations Apply sends, and
  // values the operator did not touch (sealed ones shown as "[sealed:…]") stay as stored.
  const editForm = $("edit-form");
  if (editForm) {
    const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
    const pointer = (key) => String(key).replace(/~/g, "~0").replace(/\//g, "~1");
    const shown = (v) => (v === undefined ? "" : JSON.stringify(v));
    function equal(a, b) {
      if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => equal(x, b[i]));
      if (isObject(a) && isObject(b)) {
        const ka = Object.keys(a), kb = Object.keys(b);
        return ka.length === kb.length && ka.every((k) => Object.prototype.hasOwnProperty.call(b, k) && equal(a[k], b[k]));
      }
      return a === b;
    }
    // The operations that make `before` into `after` at `path`, each with a readable row.
    function changes(before, after, path, out) {
      if (equal(before, after)) return;
      if (isObject(before) && isObject(after)) {
        for (const k of Object.keys(before)) {
          if (!Object.prototype.hasOwnProperty.call(after, k)) out.push({ op: { op: "remove", path: path + "/" + pointer(k) }, sign: "-", before: before[k] });
        }
        for (const k of Object.keys(after)) {
          const at = path + "/" + pointer(k);
          if (Object.prototype.hasOwnProperty.call(before, k)) changes(before[k], after[k], at, out);
          else out.push({ op: { op: "add", path: at, value: after[k] }, sign: "+", after: after[k] });
        }
        return;
      }
      if (Array.isArray(before) && Array.isArray(after)) {
        const common = Math.min(before.length, after.length);
        for (let i = 0; i < common; i++) changes(before[i], after[i], path + "/" + i, out);
        for (let i = common; i < after.length; i++) out.push({ op: { op: "add", path: path + "/" + i, value: after[i] }, sign: "+", after: after[i] });
        // From the end, so that each index still names the element it removes.
        for (let i = before.length - 1; i >= common; i--) out.push({ op: { op: "remove", path: path + "/" + i }, sign: "-", before: before[i] });
        return;
      }
      out.push({ op: { op: "replace", path: path, value: after }, sign: "~", before: before, after: after });
    }
    // A move to another variant ({"A": …} to {"B": …}) moves the fields over first, so the
    // fields carried over are patched in place rather than written anew.
    function patchOf(before, after) {
      const out = [];
      const one = (v) => (isObject(v) && Object.keys(v).length === 1 ? Object.keys(v)[0] : null);
      const was = one(before), now = one(after);
      if (was !== null && now !== null && was !== now) {
        out.push({ op: { op: "move", from: "/" + pointer(was), path: "/" + pointer(now) }, sign: ">", before: was, after: now });
        changes(before[was], after[now], "/" + pointer(now), out);
      } else {
        changes(before, after, "", out);
      }
      return out;
    }
    const text = $("edit-json"), result = $("edit-result"), box = $("edit-changes");
    function tell(message, ok) {
      result.textContent = message;
      result.className = ok ? "ok" : "err";
    }
    function cell(tr, content, code) {
      const td = document.createElement("td");
      if (code) { const c = document.createElement("code"); c.textContent = content; td.appendChild(c); } else td.textContent = content;
      tr.appendChild(td);
    }
    // The change as a table (signs in words, not colour alone), or null when the text is
    // not JSON or changes nothing (said next to the form).
    function preview() {
      box.textContent = "";
      let edited;
      try { edited = JSON.parse(text.value); }
      catch (e) { tell("✗ The state is not JSON: " + e.message, false); text.focus(); return null; }
      const rows = patchOf(JSON.parse(text.defaultValue), edited);
      if (rows.length === 0) {
        tell("✗ Nothing changed: the state is as stored. To run it again as it is, retry the run.", false);
        return null;
      }
      const table = document.createElement("table");
      table.className = "diff";
      table.id = "edit-diff";
      table.createCaption().textContent = "The change to apply (" + rows.length + " operation" + (rows.length === 1 ? "" : "s") + ")";
      const head = table.createTHead().insertRow();
      ["Change", "Where", "Before", "After"].forEach((h) => { const th = document.createElement("th"); th.scope = "col"; th.textContent = h; head.appendChild(th); });
      const tbody = table.createTBody();
      const words = { "+": ["dadd", "+ added"], "-": ["ddel", "− removed"], "~": ["dmod", "~ changed"], ">": ["dstate", "→ state"] };
      for (const r of rows) {
        const tr = tbody.insertRow();
        tr.className = words[r.sign][0];
        tr.dataset.path = r.op.path;
        cell(tr, words[r.sign][1], false);
        cell(tr, r.sign === ">" ? "(the variant)" : r.op.path, true);
        cell(tr, r.sign === ">" ? r.before : shown(r.before), true);
        cell(tr, r.sign === ">" ? r.after : shown(r.after), true);
      }
      box.appendChild(table);
      tell("", true);
      return rows.map((r) => r.op);
    }
    $("edit-preview").addEventListener("click", preview);
    // Served disabled: without this script, the form must not submit itself to the page
    // (the state and the reason in a URL) as if it had been applied.
    $("edit-preview").disabled = false;
    $("edit-apply").disabled = false;
    editForm.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const patch = preview();
      if (!patch) return;
      const body = { patch: patch, reason: $("edit-reason").value, override_graph: $("edit-override").checked };
      const by = $("edit-by").value.trim(), name = $("edit-state-name-input").value.trim();
      if (by) body.by = by;
      if (name) body.state_name = name;
      tell("Applying…", true);
      const r = await call("POST", "v1/runs/" + enc(editForm.dataset.run) + "/state", body);
      if (!r) { tell("✗ No token: the edit needs the API's token.", false); return; }
      if (!r.ok) { tell("✗ Refused (" + r.status + "): " + r.message, false); return; }
      editForm.querySelectorAll("input, textarea, button").forEach((el) => { el.disabled = true; });
      tell("✓ Edited: run " + r.body.id + " is " + r.body.status + " at version " + r.body.version + " in state " + r.body.state_name + "; a worker steps it from there. ", true);
      const a = document.createElement("a");
      a.id = "edit-run-link"; a.href = root + "ui/runs/" + enc(r.body.id); a.textContent = "Back to run " + r.body.id;
      result.appendChild(a);
    });
  }
  // ---- End of the edit page. ----
})();

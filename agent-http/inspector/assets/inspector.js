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
  async function send(method, path, payload) {
    let t = token();
    if (!t) t = await askToken();
    if (!t) { say("No token: actions need the API's token.", true); return null; }
    const init = { method: method, headers: { Authorization: "Bearer " + t } };
    if (payload !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(payload);
    }
    const resp = await fetch(api(path), init);
    let answer = null;
    try { answer = await resp.json(); } catch (_) { answer = null; }
    if (!resp.ok) {
      const msg = answer && answer.error ? answer.error.message : resp.statusText;
      if (resp.status === 401 || resp.status === 403) sessionStorage.removeItem(KEY);
      showTokenState();
      say("Refused (" + resp.status + "): " + msg, true);
      return null;
    }
    // A success without a body (204) is still a success.
    return answer === null ? {} : answer;
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

  document.addEventListener("submit", async (ev) => {
    const form = ev.target;
    if (form.id === "schedule-form") { ev.preventDefault(); createSchedule(); return; }
    if (form.id !== "signal-form") return;
    ev.preventDefault();
    let payload;
    if (form.dataset.fields) {
      // The controls generated from the payload's schema: one key each, typed.
      payload = {};
      for (const el of form.querySelectorAll("[data-key]")) {
        const key = el.dataset.key, control = el.dataset.control;
        if (control === "boolean") { payload[key] = el.checked; continue; }
        if (el.value === "") continue;
        if (control === "integer" || control === "number") { payload[key] = Number(el.value); continue; }
        if (control === "json") {
          try { payload[key] = JSON.parse(el.value); }
          catch (e) { say(key + " is not JSON: " + e.message, true); el.focus(); return; }
          continue;
        }
        payload[key] = el.value;
      }
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
    const es = new EventSource(url);
    es.onopen = () => { if (state) state.textContent = "live updates: on"; };
    es.onerror = () => { if (state) state.textContent = "live updates: reconnecting…"; };
    TYPES.forEach((t) => es.addEventListener(t, (m) => { let e; try { e = JSON.parse(m.data); } catch (_) { return; } onEvent(e); }));
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
  showTokenState();
})();

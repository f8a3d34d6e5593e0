// The client against live servers, as scripts/ts-client-test starts them on one SQLite
// store: `agentctl serve` (TS_CLIENT_API_URL), and the fixture agent's service
// (TS_CLIENT_SERVICE_URL: agent-http/tests/fixture_db.rs, `serve_fixture_agent`), which
// starts runs and drives them; both take the token TS_CLIENT_TOKEN. The package is
// imported by its own name, through its `exports`, as a user imports it.

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import net from "node:net";
import { after, before, test } from "node:test";
import { setTimeout } from "node:timers/promises";

import {
  ApiError,
  createClient,
  dataOrThrow,
  type DurableAgentsClient,
  type Reconnect,
  type RunEvent,
} from "durable-agents-client";

function required(name: string): string {
  const value = process.env[name];
  if (value === undefined || value === "") {
    throw new Error(`${name} is not set: scripts/ts-client-test starts the servers and sets it`);
  }
  return value;
}

const apiUrl = required("TS_CLIENT_API_URL");
const serviceUrl = required("TS_CLIENT_SERVICE_URL");
const token = required("TS_CLIENT_TOKEN");

/** `agentctl serve`: reads, signals, streams; it links no agent code, so starts no runs. */
const operator = createClient({ baseUrl: apiUrl, token });
/** The service that has the fixture agent registered: runs are started here. */
const service = createClient({ baseUrl: serviceUrl, token });

/**
 * A TCP proxy in front of a server that can cut every connection through it at once, as a
 * network that drops them does; it keeps each request's head to show what was asked.
 */
class DroppingProxy {
  readonly requests: string[] = [];
  private readonly open = new Set<net.Socket>();
  /** The client sockets a request came on. */
  private readonly used = new Set<net.Socket>();

  private constructor(private readonly server: net.Server) {}

  static async start(target: URL): Promise<DroppingProxy> {
    const server = net.createServer();
    const proxy = new DroppingProxy(server);
    server.on("connection", (client) => {
      const upstream = net.connect(Number(target.port), target.hostname);
      proxy.open.add(client).add(upstream);
      let head = "";
      client.on("data", (chunk: Buffer) => {
        proxy.used.add(client);
        head += chunk.toString("latin1");
        let end: number;
        while ((end = head.indexOf("\r\n\r\n")) !== -1) {
          proxy.requests.push(head.slice(0, end));
          head = head.slice(end + 4);
        }
      });
      client.pipe(upstream).pipe(client);
      for (const [socket, other] of [
        [client, upstream],
        [upstream, client],
      ] as const) {
        socket.on("error", () => other.destroy());
        socket.on("close", () => {
          proxy.open.delete(socket);
          proxy.used.delete(socket);
          other.destroy();
        });
      }
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return proxy;
  }

  get url(): string {
    const address = this.server.address() as net.AddressInfo;
    return `http://127.0.0.1:${address.port}`;
  }

  /**
   * The connections open through the proxy that carried a request. Not the idle ones:
   * Node.js's fetch opens a spare connection when a body is cancelled, and keeps it until
   * its keep-alive timeout.
   */
  get connectionsInUse(): number {
    return [...this.used].filter((client) => this.open.has(client)).length;
  }

  /** Resets every connection through the proxy (a TCP RST, no orderly close); how many. */
  drop(): number {
    const count = this.open.size;
    for (const socket of this.open) socket.resetAndDestroy();
    return count;
  }

  async close(): Promise<void> {
    this.drop();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** The `Last-Event-ID` of a request's head (`undefined`: none). */
function resumedAfter(requestHead: string): string | undefined {
  const header = /^last-event-id:\s*(.*)$/im.exec(requestHead);
  return header?.[1]?.trim();
}

let proxy: DroppingProxy;
/** The run the first test completes, for the next to follow again. */
let completedRunId: string | undefined;
before(async () => {
  proxy = await DroppingProxy.start(new URL(apiUrl));
});
after(async () => {
  await proxy.close();
});

async function startRun(client: DurableAgentsClient, id: string) {
  return client.api.POST("/v1/agents/{agent}/runs", {
    params: { path: { agent: "Order" } },
    body: { id, state: { Start: { items: ["apple", "kiwi"] } }, labels: { client: "typescript" } },
  });
}

/** Whether `event` says the run now waits for `confirm`. */
function waitsForConfirm(event: RunEvent): boolean {
  return event.type === "wait_entered" && event.waiting_for === "confirm";
}

test("a run started, followed across dropped connections, signalled, completes", { timeout: 60_000 }, async (t) => {
  const runId = `ts-client-${randomUUID()}`;
  const started = await startRun(service, runId);
  assert.equal(started.response.status, 201, JSON.stringify(started.error));
  assert.equal(started.data?.created, true);
  assert.equal(started.data?.run.id, runId);
  assert.equal(started.data?.run.agent, "Order");

  // The same start again is idempotent, answered 200 with the run.
  const again = await startRun(service, runId);
  assert.equal(again.response.status, 200);
  assert.equal(again.data?.created, false);

  const following = createClient({ baseUrl: proxy.url, token });
  const seen: RunEvent[] = [];
  const reconnects: Array<Reconnect & { lastSeen: string | undefined }> = [];
  let firstDrop = 0;
  let waitCursor: string | undefined;
  for await (const event of following.followRun(runId, {
    maxRetries: 5,
    onReconnect: (reconnect) => {
      reconnects.push({ ...reconnect, lastSeen: seen.at(-1)?.cursor.toString() });
    },
  })) {
    seen.push(event);
    if (seen.length === 1) {
      // Midway through what was stored. The server holds the stream open, so there is a
      // connection to cut; what the client had received before it is still delivered.
      firstDrop = proxy.drop();
    }
    if (waitsForConfirm(event) && waitCursor === undefined) {
      // Live: the events after the signal are committed while no connection is open, so
      // they come over a connection that resumes after this event, whichever connection
      // delivered it (the first one's rest may have been received before its cut).
      waitCursor = String(event.cursor);
      proxy.drop();
      const sent = await operator.api.POST("/v1/runs/{id}/signals", {
        params: { path: { id: runId } },
        body: { name: "confirm", payload: { ok: true } },
      });
      assert.equal(sent.response.status, 200, JSON.stringify(sent.error));
      assert.equal(sent.data?.duplicate, false);
    }
  }

  assert.notEqual(waitCursor, undefined, `never waited for confirm: ${seen.map((e) => e.type).join(", ")}`);
  assert.ok(firstDrop > 0, "the first cut found the stream's connection open");
  const last = seen.at(-1);
  assert.equal(last?.type, "run_finished");
  assert.equal(last.type === "run_finished" ? last.status : undefined, "completed");

  // Resumed from its cursor: each reconnect asked for the events after the last one
  // yielded, and said so to the server; one resumed after the wait.
  const described = JSON.stringify(reconnects.map((r) => ({ after: r.after, error: String(r.error) })));
  for (const reconnect of reconnects) {
    assert.notEqual(reconnect.after, undefined, described);
    assert.equal(reconnect.after, reconnect.lastSeen, described);
  }
  assert.ok(
    reconnects.some((r) => r.after === waitCursor),
    `no reconnect after the wait's event ${waitCursor}: ${described}`,
  );
  const streamRequests = proxy.requests.filter((r) => r.includes(`/v1/runs/${runId}/events/stream`));
  assert.equal(streamRequests.length, reconnects.length + 1);
  assert.equal(resumedAfter(streamRequests[0] ?? ""), undefined, "the first request starts at the start");
  assert.deepEqual(
    streamRequests.slice(1).map(resumedAfter),
    reconnects.map((r) => r.after),
  );

  // Nothing lost, nothing twice: the cursors are the stored events' cursors, in order.
  const cursors = seen.map((e) => e.cursor);
  const stored = dataOrThrow(
    await operator.api.GET("/v1/runs/{id}/events", {
      params: { path: { id: runId }, query: { limit: 1000 } },
    }),
  );
  assert.deepEqual(
    cursors,
    stored.events.map((e) => e.cursor),
  );
  assert.ok(cursors.every((c, i) => i === 0 || c > (cursors[i - 1] ?? Infinity)));
  assert.equal(seen[0]?.type, "run_created");
  assert.ok(seen.some((e) => e.type === "signal_consumed" && e.name === "confirm"));

  const run = dataOrThrow(await operator.api.GET("/v1/runs/{id}", { params: { path: { id: runId } } }));
  assert.equal(run.status, "completed");
  assert.equal(run.state_name, "Done");
  completedRunId = runId;
  t.diagnostic(
    `${seen.length} events, cursors ${cursors.join(" ")}; ` +
      `resumed after ${reconnects.map((r) => r.after).join(" and ")} (the wait: ${waitCursor})`,
  );
});

test("every run's events of an agent from a cursor; break and abort end the iteration", { timeout: 30_000 }, async () => {
  const runId = completedRunId;
  assert.ok(runId, "the first test completed a run");
  const stored = dataOrThrow(
    await operator.api.GET("/v1/runs/{id}/events", { params: { path: { id: runId } } }),
  ).events;
  const first = stored[0];
  assert.ok(first);

  // The agent's events after the run's first: among them, the rest of the run's, in order.
  // Through the proxy, to see the connection closed when the loop breaks.
  proxy.drop();
  const following = createClient({ baseUrl: proxy.url, token });
  const rest: number[] = [];
  for await (const event of following.followEvents({ agent: "Order", after: first.cursor })) {
    assert.equal(event.agent, "Order");
    assert.ok(event.cursor > first.cursor);
    if (event.run_id !== runId) continue;
    rest.push(event.cursor);
    if (event.type === "run_finished") break;
  }
  assert.deepEqual(
    rest,
    stored.slice(1).map((e) => e.cursor),
  );
  const deadline = Date.now() + 2000;
  while (proxy.connectionsInUse > 0 && Date.now() < deadline) await setTimeout(20);
  assert.equal(proxy.connectionsInUse, 0, "breaking out of the loop closed the stream's connection");

  // After its second-to-last event, not until it finishes: the last is yielded, then
  // nothing comes until the abort ends the iteration.
  const abort = new AbortController();
  const seen: number[] = [];
  const began = Date.now();
  void setTimeout(300).then(() => abort.abort());
  for await (const event of operator.followRun(runId, {
    after: stored.at(-2)?.cursor ?? 0,
    untilFinished: false,
    signal: abort.signal,
  })) {
    seen.push(event.cursor);
  }
  assert.deepEqual(
    seen,
    stored.slice(-1).map((e) => e.cursor),
  );
  assert.ok(Date.now() - began < 5000, "the abort ended the iteration");
});

test("refusals are typed errors", { timeout: 30_000 }, async () => {
  const anonymous = createClient({ baseUrl: apiUrl });
  const runId = `ts-client-${randomUUID()}`;

  // A write without the token: 401, in the API's error shape, typed.
  const unsigned = await anonymous.api.POST("/v1/runs/{id}/signals", {
    params: { path: { id: runId } },
    body: { name: "confirm", payload: { ok: true } },
  });
  assert.equal(unsigned.response.status, 401);
  assert.equal(unsigned.error?.error.code, "unauthorized");
  assert.match(unsigned.error?.error.message ?? "", /token/i);
  assert.throws(
    () => dataOrThrow(unsigned),
    (e: unknown) => e instanceof ApiError && e.status === 401 && e.code === "unauthorized",
  );

  // `agentctl serve` links no agent code: it starts no runs, and says so.
  const nowhere = await startRun(operator, runId);
  assert.equal(nowhere.response.status, 404);
  assert.equal(nowhere.error?.error.code, "not_found");
  assert.match(nowhere.error?.error.message ?? "", /starts no runs/);

  // An agent the service does not have: 404 naming the ones it has.
  const unknown = await service.api.POST("/v1/agents/{agent}/runs", {
    params: { path: { agent: "Nope" } },
    body: { state: { Start: { items: [] } } },
  });
  assert.equal(unknown.response.status, 404);
  assert.match(unknown.error?.error.message ?? "", /`Order`/);

  // A state that is not initial: 422.
  const late = await service.api.POST("/v1/agents/{agent}/runs", {
    params: { path: { agent: "Order" } },
    body: { id: runId, state: { Done: { payment_id: "p" } } },
  });
  assert.equal(late.response.status, 422);
  assert.equal(late.error?.error.code, "unprocessable");

  // A stream that cannot be had is not retried: the iteration throws the typed error.
  await assert.rejects(
    async () => {
      for await (const event of operator.followRun(runId)) assert.fail(`an event of no run: ${event.type}`);
    },
    (e: unknown) => e instanceof ApiError && e.status === 404 && e.code === "not_found",
  );
});

test("bad arguments are refused when given, saying what is expected", () => {
  assert.throws(() => createClient({ baseUrl: "127.0.0.1:8080" }), /absolute URL/);
  assert.throws(() => createClient({ baseUrl: "ftp://127.0.0.1" }), /http: or https:/);
  assert.throws(() => createClient({ baseUrl: apiUrl, token: " " }), /`token` is empty/);
  assert.throws(() => operator.followRun(""), /non-empty string/);
  assert.throws(() => operator.followRun("r", { after: "17x" }), /`after` is a cursor/);
  assert.throws(() => operator.followRun("r", { after: -1 }), /`after` is a cursor/);
  assert.throws(() => operator.followRun("r", { maxRetries: -1 }), /`maxRetries` is 0 or more/);
  assert.throws(() => operator.followEvents({ agent: "" }), /agent's name/);
});

// Never called: `tsc` checks these lines, and fails when a wrong call type-checks.
export function wrongCallsDoNotTypeCheck(client: DurableAgentsClient): void {
  // @ts-expect-error a signal has a name
  void client.api.POST("/v1/runs/{id}/signals", { params: { path: { id: "r" } }, body: { payload: 1 } });
  // @ts-expect-error no such path in the document
  void client.api.GET("/v1/nothing");
  // @ts-expect-error a run's path needs its id
  void client.api.GET("/v1/runs/{id}", {});
  // @ts-expect-error `limit` is a number
  void client.api.GET("/v1/runs", { params: { query: { limit: "10" } } });
}

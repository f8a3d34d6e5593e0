// The event iterator against a scripted `fetch`: what the live test cannot make a real
// server do on cue (answer 503, send an `error` message, send a broken event, stay away).

import assert from "node:assert/strict";
import { test } from "node:test";

import { ApiError, createClient, type Reconnect, type RunEvent } from "durable-agents-client";

type Answer = Response | Error;

/** A `fetch` that answers from `script` in order, and keeps what each request asked. */
function scripted(script: Array<() => Answer>) {
  const asked: Array<{ url: string; lastEventId: string | null; authorization: string | null }> = [];
  const fetch = async (request: Request): Promise<Response> => {
    asked.push({
      url: request.url,
      lastEventId: request.headers.get("last-event-id"),
      authorization: request.headers.get("authorization"),
    });
    const next = script.shift();
    if (next === undefined) throw new Error("the script has no more answers");
    const answer = next();
    if (answer instanceof Error) throw answer;
    return answer;
  };
  return { fetch, asked };
}

/** An event stream of `text`, cut (a network error) after it when `cut` is set. */
function stream(text: string, cut = false): Response {
  let sent = false;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (!sent) {
        sent = true;
        controller.enqueue(new TextEncoder().encode(text));
      } else if (cut) {
        controller.error(new TypeError("terminated"));
      } else {
        controller.close();
      }
    },
  });
  return new Response(body, { headers: { "content-type": "text/event-stream" } });
}

function event(cursor: number, kind: "run_created" | "run_finished"): string {
  const fields = kind === "run_created" ? { state: "Start" } : { status: "completed" };
  const data = { cursor, run_id: "r", agent: "Order", at: 0, type: kind, ...fields };
  return `id: ${cursor}\nevent: ${kind}\ndata: ${JSON.stringify(data)}\n\n`;
}

function errorAnswer(status: number, code: string, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify({ error: { code, message: `${code}, scripted` } }), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}

async function collect(events: AsyncIterable<RunEvent>): Promise<number[]> {
  const cursors: number[] = [];
  for await (const e of events) cursors.push(e.cursor);
  return cursors;
}

test("a server away (503) and a stream cut are retried, resuming after the last cursor", async () => {
  const { fetch, asked } = scripted([
    () => errorAnswer(503, "unavailable", { "retry-after": "0" }),
    () => stream(event(1, "run_created"), true),
    () => stream(event(2, "run_finished")),
  ]);
  const client = createClient({ baseUrl: "http://api.test/mount/", token: "t0k3n", fetch });
  const reconnects: Reconnect[] = [];
  const cursors = await collect(
    client.followRun("r", { maxRetryDelayMs: 5, onReconnect: (r) => reconnects.push(r) }),
  );
  assert.deepEqual(cursors, [1, 2]);
  assert.deepEqual(
    asked.map((a) => a.lastEventId),
    [null, null, "1"],
  );
  assert.ok(asked.every((a) => a.url === "http://api.test/mount/v1/runs/r/events/stream?until_finished=true"));
  assert.ok(asked.every((a) => a.authorization === "Bearer t0k3n"));
  assert.deepEqual(
    reconnects.map((r) => [r.after, r.attempt, r.error instanceof ApiError ? r.error.code : String(r.error)]),
    [
      [undefined, 1, "unavailable"],
      ["1", 1, "TypeError: terminated"],
    ],
  );
  assert.equal(reconnects[0]?.delayMs, 0, "Retry-After: 0 is waited, not the backoff");
});

test("tokens go to onToken; the server's `error` message is a reconnect", async () => {
  const { fetch, asked } = scripted([
    () =>
      stream(
        'event: token\ndata: {"run_id":"r","version":0,"call":0,"seq":0,"at":0,"type":"token_delta","text":"Pa"}\n\n' +
          "event: error\ndata: the store is away\n\n",
      ),
    () => stream(event(5, "run_finished")),
  ]);
  const client = createClient({ baseUrl: "http://api.test", fetch });
  const tokens: string[] = [];
  const errors: string[] = [];
  const cursors = await collect(
    client.followRun("r", {
      after: 4,
      maxRetryDelayMs: 0,
      onToken: (t) => tokens.push(t.text),
      onReconnect: (r) => errors.push(String(r.error)),
    }),
  );
  assert.deepEqual(cursors, [5]);
  assert.deepEqual(tokens, ["Pa"]);
  assert.deepEqual(errors, ["Error: the server ended the stream: the store is away"]);
  assert.deepEqual(
    asked.map((a) => a.lastEventId),
    ["4", "4"],
  );
});

test("an answer no retry changes, or an event that is not JSON, ends it at once", async () => {
  const notFound = scripted([() => errorAnswer(404, "not_found")]);
  await assert.rejects(
    collect(createClient({ baseUrl: "http://api.test", fetch: notFound.fetch }).followRun("r")),
    (e: unknown) => e instanceof ApiError && e.status === 404 && e.code === "not_found",
  );
  assert.equal(notFound.asked.length, 1);

  const broken = scripted([() => stream(`${event(1, "run_created")}id: 2\ndata: {"cursor": 2,\n\n`)]);
  const seen: number[] = [];
  await assert.rejects(async () => {
    for await (const e of createClient({ baseUrl: "http://api.test", fetch: broken.fetch }).followRun("r")) {
      seen.push(e.cursor);
    }
  }, /a `message` message that is not JSON, after cursor 1: \{"cursor": 2,/);
  assert.deepEqual(seen, [1]);
  assert.equal(broken.asked.length, 1);

  const html = scripted([() => new Response("<html>", { headers: { "content-type": "text/html" } })]);
  await assert.rejects(
    collect(createClient({ baseUrl: "http://api.test", fetch: html.fetch }).followEvents()),
    (e: unknown) => e instanceof ApiError && e.code === "not_an_event_stream" && /text\/html/.test(e.message),
  );
});

test("after maxRetries failures in a row, the last error is thrown", async () => {
  const away = scripted([
    () => new TypeError("fetch failed"),
    () => new TypeError("fetch failed"),
    () => new TypeError("fetch failed, the third time"),
  ]);
  const client = createClient({ baseUrl: "http://api.test", fetch: away.fetch });
  await assert.rejects(
    collect(client.followEvents({ agent: "Order", maxRetries: 2, maxRetryDelayMs: 0 })),
    /fetch failed, the third time/,
  );
  assert.equal(away.asked.length, 3);
  assert.equal(away.asked[0]?.url, "http://api.test/v1/events/stream?agent=Order");
});

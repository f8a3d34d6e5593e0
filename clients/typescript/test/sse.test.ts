// The event stream reader on bytes cut where a network cuts them: inside a line, between
// the CR and LF of a line end, inside a UTF-8 character.

import assert from "node:assert/strict";
import { test } from "node:test";

import { readServerSentEvents, type ServerSentEvent } from "durable-agents-client";

function body(chunks: Array<string | Uint8Array>, failWith?: Error): ReadableStream<Uint8Array> {
  const encoder = new TextEncoder();
  const pending = [...chunks];
  // One chunk a read, as a socket delivers them: an error raised at once would discard
  // the chunks still queued.
  return new ReadableStream<Uint8Array>({
    pull(controller) {
      const chunk = pending.shift();
      if (chunk !== undefined) {
        controller.enqueue(typeof chunk === "string" ? encoder.encode(chunk) : chunk);
      } else if (failWith) {
        controller.error(failWith);
      } else {
        controller.close();
      }
    },
  });
}

async function read(stream: ReadableStream<Uint8Array>): Promise<ServerSentEvent[]> {
  const messages: ServerSentEvent[] = [];
  for await (const message of readServerSentEvents(stream)) messages.push(message);
  return messages;
}

test("messages of the server's shape, with comments and a token without an id", async () => {
  const messages = await read(
    body([
      ": keep-alive\n\n",
      "id: 17\nevent: transition_committed\ndata: {\"cursor\":17}\n\n",
      "event: token\ndata: {\"text\":\"Pay\"}\n\n",
    ]),
  );
  assert.deepEqual(messages, [
    { event: "transition_committed", id: "17", data: '{"cursor":17}', retry: undefined },
    { event: "token", id: undefined, data: '{"text":"Pay"}', retry: undefined },
  ]);
});

test("lines cut anywhere, CRLF split across chunks, CR alone, multi-line data", async () => {
  const euro = new TextEncoder().encode("€");
  const messages = await read(
    body([
      "\uFEFFda",
      "ta: one\r",
      "\ndata: two\rid: 3",
      "\r\n\r",
      "\ndata:",
      euro.slice(0, 1),
      euro.slice(1),
      "\nretry: 1500\n\n",
    ]),
  );
  assert.deepEqual(messages, [
    { event: "message", id: "3", data: "one\ntwo", retry: undefined },
    { event: "message", id: undefined, data: "€", retry: 1500 },
  ]);
});

test("a message cut off by the end of the body is dropped", async () => {
  assert.deepEqual(await read(body(["id: 1\ndata: {}\n\n", "id: 2\ndata: {\"par"])), [
    { event: "message", id: "1", data: "{}", retry: undefined },
  ]);
});

test("a dropped connection is thrown after the messages received before it", async () => {
  const seen: string[] = [];
  await assert.rejects(async () => {
    for await (const message of readServerSentEvents(
      body(["id: 1\ndata: a\n\nid: 2\ndata: b\n\nid: 3\nda"], new Error("socket hang up")),
    )) {
      seen.push(message.id ?? "");
    }
  }, /socket hang up/);
  assert.deepEqual(seen, ["1", "2"]);
});

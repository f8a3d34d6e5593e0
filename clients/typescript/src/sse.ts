// Server-sent events read from a fetch body, as the HTML standard's event stream
// interpretation says (https://html.spec.whatwg.org/multipage/server-sent-events.html):
// written here rather than taken from `EventSource`, which cannot send an
// `Authorization` header and does not exist in Node.js 18 and 20.

/** One message of an event stream. */
export interface ServerSentEvent {
  /** The `event:` field, `"message"` when the message has none. */
  event: string;
  /** The `id:` field of this message, `undefined` when it has none. */
  id: string | undefined;
  /** The `data:` lines, joined by newlines. */
  data: string;
  /** The `retry:` field: how long to wait before reconnecting, in milliseconds. */
  retry: number | undefined;
}

/**
 * The messages of an event stream, in order, as its bytes come. Ends when the body ends;
 * a message cut off by the end is dropped, as the standard says. An error of the body
 * (a dropped connection) is thrown from the iteration after the messages received before it.
 */
export async function* readServerSentEvents(
  body: ReadableStream<Uint8Array>,
): AsyncGenerator<ServerSentEvent, void, undefined> {
  const decoder = new TextDecoder("utf-8");
  const reader = body.getReader();
  let buffered = "";
  let message = emptyMessage();
  let first = true;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buffered += decoder.decode(value, { stream: true });
      if (first && buffered.length > 0) {
        // A byte order mark before the first field is not part of it.
        if (buffered.charCodeAt(0) === 0xfeff) buffered = buffered.slice(1);
        first = false;
      }
      // A line ends at CRLF, LF or CR; a CR last in the buffer may be the start of a CRLF
      // split across chunks, so it waits for the next chunk.
      for (;;) {
        const end = lineEnd(buffered);
        if (end === undefined) break;
        const line = buffered.slice(0, end.at);
        buffered = buffered.slice(end.at + end.length);
        if (line === "") {
          if (message.hasData) {
            yield {
              event: message.event || "message",
              id: message.id,
              data: message.data.join("\n"),
              retry: message.retry,
            };
          }
          message = emptyMessage();
          continue;
        }
        readField(line, message);
      }
    }
  } finally {
    // Cancelling tells fetch to close the connection when the consumer stops early.
    await reader.cancel().catch(() => undefined);
  }
}

interface PendingMessage {
  event: string;
  id: string | undefined;
  data: string[];
  hasData: boolean;
  retry: number | undefined;
}

function emptyMessage(): PendingMessage {
  return { event: "", id: undefined, data: [], hasData: false, retry: undefined };
}

function lineEnd(text: string): { at: number; length: number } | undefined {
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x0a) return { at: i, length: 1 };
    if (c === 0x0d) {
      if (i + 1 === text.length) return undefined;
      return { at: i, length: text.charCodeAt(i + 1) === 0x0a ? 2 : 1 };
    }
  }
  return undefined;
}

function readField(line: string, message: PendingMessage): void {
  // A line starting with a colon is a comment (the server's keep-alive).
  if (line.startsWith(":")) return;
  const colon = line.indexOf(":");
  const name = colon === -1 ? line : line.slice(0, colon);
  let value = colon === -1 ? "" : line.slice(colon + 1);
  if (value.startsWith(" ")) value = value.slice(1);
  switch (name) {
    case "event":
      message.event = value;
      break;
    case "data":
      message.data.push(value);
      message.hasData = true;
      break;
    case "id":
      // An id holding a NUL is ignored, as the standard says.
      if (!value.includes("\u0000")) message.id = value;
      break;
    case "retry":
      if (/^[0-9]+$/.test(value)) message.retry = Number(value);
      break;
    default:
      // Unknown fields are ignored.
      break;
  }
}

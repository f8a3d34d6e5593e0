import { ApiError } from "./errors.js";
import type { components } from "./schema.js";
import { readServerSentEvents, type ServerSentEvent } from "./sse.js";

/** One thing a run did, as committed: `cursor` is where it is in the store's order. */
export type RunEvent = components["schemas"]["RunEvent"];

/** The `type` of a {@link RunEvent}: `run_created`, `transition_committed`, `run_finished`, ... */
export type RunEventType = RunEvent["type"];

/**
 * A model's tokens as they come, on a stream of a server that runs the runner in its own
 * process (`ApiConfig::with_ephemeral`). Never stored and never replayed: a reconnect
 * loses the deltas sent meanwhile (a gap in `seq` shows it), never a durable event.
 */
export interface TokenDelta {
  run_id: string;
  version: number;
  call: number;
  seq: number;
  at: number;
  type: "token_delta";
  text: string;
}

/** What a reconnect was for, given to {@link FollowOptions.onReconnect}. */
export interface Reconnect {
  /** The cursor the stream resumes after (`Last-Event-ID`); `undefined`: from the start. */
  after: string | undefined;
  /** Connections in a row that failed without delivering an event, this one included. */
  attempt: number;
  /** Why the last connection ended: a network error, an {@link ApiError}, a stream cut off. */
  error: unknown;
  /** How long the iterator waits before connecting again. */
  delayMs: number;
}

/** How to follow an event stream. */
export interface FollowOptions {
  /**
   * Start after this cursor (the `cursor` of the last event already seen); from the first
   * event when absent.
   */
  after?: number | string | undefined;
  /** Stops following: the iteration ends without an error, the connection is closed. */
  signal?: AbortSignal | undefined;
  /**
   * Connections in a row that may fail without delivering an event before the iteration
   * throws the last error; no limit by default, as browsers' `EventSource` does.
   */
  maxRetries?: number | undefined;
  /**
   * The longest wait between two connections, in milliseconds (10 s by default). The wait
   * starts at 250 ms and doubles with each failure in a row; a `Retry-After` or the
   * stream's `retry:` field, when given, is used instead.
   */
  maxRetryDelayMs?: number | undefined;
  /** Told before each reconnect: for logs, or a "reconnecting" mark in a page. */
  onReconnect?: ((reconnect: Reconnect) => void) | undefined;
  /** Given each token delta of the stream (see {@link TokenDelta}). */
  onToken?: ((delta: TokenDelta) => void) | undefined;
}

/** The answer of one connection: the stream's body, or what the server answered instead. */
export type StreamAnswer =
  | { body: ReadableStream<Uint8Array>; response: Response }
  | { body?: undefined; error: unknown; response: Response };

/** Opens one connection, resuming after `after` (sent as `Last-Event-ID`). */
export type Connect = (after: string | undefined, signal: AbortSignal) => Promise<StreamAnswer>;

const FIRST_RETRY_DELAY_MS = 250;
const DEFAULT_MAX_RETRY_DELAY_MS = 10_000;

/**
 * The durable events of a stream, each once and in order, across as many connections as it
 * takes: after a dropped connection, a stream that ended early or a server that was away,
 * it connects again with the cursor of the last event it yielded, so the server sends
 * exactly the events after it. Ends when `stopAt` says so of an event (after yielding it),
 * when `options.signal` aborts, or when the consumer stops iterating; throws an
 * {@link ApiError} for an answer no retry changes (`400`, `401`, `403`, `404`, `429`, `500`) and
 * the last error after `maxRetries` failures in a row.
 */
export function followStream(
  connect: Connect,
  options: FollowOptions,
  stopAt: (event: RunEvent) => boolean,
): AsyncGenerator<RunEvent, void, undefined> {
  // Checked here, when the caller asks, not at the first event, where a mistake would
  // surface far from its cause.
  const maxRetries = options.maxRetries ?? Number.POSITIVE_INFINITY;
  const maxDelay = options.maxRetryDelayMs ?? DEFAULT_MAX_RETRY_DELAY_MS;
  if (options.after !== undefined && !/^[0-9]+$/.test(String(options.after))) {
    throw new TypeError(
      `\`after\` is a cursor (a whole number, 0 or more), not \`${String(options.after)}\``,
    );
  }
  if (!(maxRetries >= 0)) {
    throw new TypeError(`\`maxRetries\` is 0 or more, not \`${String(options.maxRetries)}\``);
  }
  if (!(maxDelay >= 0 && Number.isFinite(maxDelay))) {
    throw new TypeError(
      `\`maxRetryDelayMs\` is a number of milliseconds, not \`${String(options.maxRetryDelayMs)}\``,
    );
  }
  return follow(connect, options, stopAt, maxRetries, maxDelay);
}

async function* follow(
  connect: Connect,
  options: FollowOptions,
  stopAt: (event: RunEvent) => boolean,
  maxRetries: number,
  maxDelay: number,
): AsyncGenerator<RunEvent, void, undefined> {
  let after = options.after === undefined ? undefined : String(options.after);
  // Ours, so that a consumer that stops iterating closes the connection even when it
  // passed no signal of its own.
  const stop = new AbortController();
  const forward = () => stop.abort(options.signal?.reason);
  if (options.signal?.aborted) return;
  options.signal?.addEventListener("abort", forward, { once: true });
  let failures = 0;
  try {
    while (!stop.signal.aborted) {
      // Only what the network and the server do is retried: an error of the consumer's
      // callbacks, or an event that does not parse, would come again on every retry.
      let failure: unknown;
      let serverDelayMs: number | undefined;
      let answer: StreamAnswer | undefined;
      try {
        answer = await connect(after, stop.signal);
      } catch (error) {
        if (stop.signal.aborted) return;
        failure = error;
      }
      if (answer?.body === undefined && answer !== undefined) {
        const error = ApiError.fromAnswer(answer.response, answer.error);
        if (!retryable(error.status)) throw error;
        failure = error;
        if (error.retryAfterSeconds !== undefined) serverDelayMs = error.retryAfterSeconds * 1000;
      } else if (answer?.body !== undefined) {
        const type = answer.response.headers.get("content-type") ?? "";
        if (!type.startsWith("text/event-stream")) {
          await answer.body.cancel().catch(() => undefined);
          throw new ApiError(
            answer.response.status,
            "not_an_event_stream",
            `expected text/event-stream, the server answered \`${type || "no content type"}\``,
            undefined,
            undefined,
          );
        }
        const messages = readServerSentEvents(answer.body);
        try {
          for (;;) {
            let next: IteratorResult<ServerSentEvent, void>;
            try {
              next = await messages.next();
            } catch (error) {
              if (stop.signal.aborted) return;
              failure = error;
              break;
            }
            if (next.done) {
              failure ??= new Error("the event stream ended before the events asked for");
              break;
            }
            const message = next.value;
            if (message.retry !== undefined) serverDelayMs = message.retry;
            if (message.event === "token") {
              options.onToken?.(parsed<TokenDelta>(message, after));
              continue;
            }
            if (message.event === "error") {
              // The server's store failed; it ends the stream, and the events after the
              // cursor are still there to read once it is back.
              failure = new Error(`the server ended the stream: ${message.data}`);
              continue;
            }
            const event = parsed<RunEvent>(message, after);
            after = message.id ?? String(event.cursor);
            failures = 0;
            yield event;
            if (stopAt(event)) return;
          }
        } finally {
          // Closes the connection when the consumer stops, or an error ends the loop.
          await messages.return(undefined);
        }
      }
      failures += 1;
      if (failures > maxRetries) throw failure;
      const delayMs = Math.min(
        serverDelayMs ?? FIRST_RETRY_DELAY_MS * 2 ** Math.min(failures - 1, 16),
        maxDelay,
      );
      options.onReconnect?.({ after, attempt: failures, error: failure, delayMs });
      await sleep(delayMs, stop.signal);
    }
  } finally {
    options.signal?.removeEventListener("abort", forward);
    stop.abort();
  }
}

function parsed<T>(message: ServerSentEvent, after: string | undefined): T {
  try {
    return JSON.parse(message.data) as T;
  } catch (error) {
    throw new Error(
      `the server sent a \`${message.event}\` message that is not JSON, after cursor ` +
        `${after ?? "(none)"}: ${message.data.slice(0, 200)}`,
      { cause: error },
    );
  }
}

/**
 * Whether trying again can help: the server, or a proxy in front of it, was away or full.
 * Not a `500`: a record that does not read or a misconfigured server stays so.
 */
function retryable(status: number): boolean {
  return status === 408 || status === 502 || status === 503 || status === 504;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

import createFetchClient, { type Client } from "openapi-fetch";

import { type Connect, type FollowOptions, type RunEvent, followStream } from "./events.js";
import type { paths } from "./schema.js";

/** Where the API is and how to reach it. */
export interface ClientOptions {
  /**
   * The server's URL with the router's mount point: `http://127.0.0.1:8080` for
   * `agentctl serve`, `https://ops.example.com/agents` for a service that mounts the
   * router under `/agents`.
   */
  baseUrl: string;
  /**
   * The bearer token: every write needs it, and so do reads off loopback. Without it,
   * writes are answered `401 unauthorized`.
   */
  token?: string | undefined;
  /** Headers sent with every request, besides the token's. */
  headers?: Record<string, string> | undefined;
  /**
   * The `fetch` to send requests with (`globalThis.fetch` by default): a runtime without a
   * global one, a proxy agent, a test's recorder.
   */
  fetch?: ((request: Request) => Promise<Response>) | undefined;
}

/** How to follow one run's events. */
export interface FollowRunOptions extends FollowOptions {
  /**
   * End the iteration after the run's next `run_finished` event (the server ends the
   * stream there too). `true` by default; `false` follows the run for as long as the
   * iteration goes on (a failed run that is retried finishes again).
   */
  untilFinished?: boolean | undefined;
}

/** How to follow every run's events. */
export interface FollowEventsOptions extends FollowOptions {
  /** Only this agent's runs. */
  agent?: string | undefined;
}

/** A client of the durable agents HTTP API. */
export interface DurableAgentsClient {
  /**
   * Every operation of the API's OpenAPI document, typed by path, parameters, body and
   * answers (openapi-fetch): each call answers `{ data, response }` or
   * `{ error, response }`, `error` being the API's error body.
   *
   * ```ts
   * const { data, error } = await client.api.POST("/v1/runs/{id}/signals", {
   *   params: { path: { id: "order-42" } },
   *   body: { name: "confirm", payload: { ok: true } },
   * });
   * ```
   */
  readonly api: Client<paths>;
  /**
   * A run's events as they are committed, as an async iterator: first those stored after
   * `options.after` (from the run's first event when absent), then each new one. A dropped
   * connection is reconnected from the cursor of the last event yielded: no event is
   * missed or repeated.
   *
   * ```ts
   * for await (const event of client.followRun("order-42")) {
   *   console.log(event.cursor, event.type);
   * }
   * ```
   */
  followRun(runId: string, options?: FollowRunOptions): AsyncGenerator<RunEvent, void, undefined>;
  /** Every run's events (or one agent's), as {@link followRun} follows one run's; never ends on its own. */
  followEvents(options?: FollowEventsOptions): AsyncGenerator<RunEvent, void, undefined>;
}

/** A client of the API at `options.baseUrl`. */
export function createClient(options: ClientOptions): DurableAgentsClient {
  const baseUrl = checkedBaseUrl(options.baseUrl);
  if (options.token !== undefined && options.token.trim() === "") {
    throw new TypeError("`token` is empty: leave it out for a client without one");
  }
  const headers: Record<string, string> = { ...options.headers };
  if (options.token !== undefined) headers.authorization = `Bearer ${options.token}`;
  const api = createFetchClient<paths>({
    baseUrl,
    headers,
    ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
  });

  // Both streams through the typed client: a change of their paths or parameters in the
  // document fails this package's type check.
  const followRun = (runId: string, follow: FollowRunOptions = {}) => {
    if (typeof runId !== "string" || runId === "") {
      throw new TypeError("a run's id is a non-empty string");
    }
    const untilFinished = follow.untilFinished ?? true;
    const connect: Connect = async (after, signal) => {
      const answer = await api.GET("/v1/runs/{id}/events/stream", {
        params: {
          path: { id: runId },
          query: { until_finished: untilFinished },
          ...resumeHeader(after),
        },
        headers: { accept: "text/event-stream" },
        parseAs: "stream",
        signal,
      });
      return streamAnswer(answer);
    };
    return followStream(connect, follow, (event) => untilFinished && event.type === "run_finished");
  };

  const followEvents = (follow: FollowEventsOptions = {}) => {
    if (follow.agent === "") throw new TypeError("`agent` is an agent's name, not empty");
    const connect: Connect = async (after, signal) => {
      const answer = await api.GET("/v1/events/stream", {
        params: {
          query: follow.agent === undefined ? {} : { agent: follow.agent },
          ...resumeHeader(after),
        },
        headers: { accept: "text/event-stream" },
        parseAs: "stream",
        signal,
      });
      return streamAnswer(answer);
    };
    return followStream(connect, follow, () => false);
  };

  return { api, followRun, followEvents };
}

/** `Last-Event-ID`: the server sends the events after it, as to a browser's `EventSource`. */
function resumeHeader(after: string | undefined): { header?: { "Last-Event-ID": string } } {
  return after === undefined ? {} : { header: { "Last-Event-ID": after } };
}

function streamAnswer(answer: {
  data?: ReadableStream<Uint8Array> | null;
  error?: unknown;
  response: Response;
}): Awaited<ReturnType<Connect>> {
  if (answer.response.ok && answer.data) return { body: answer.data, response: answer.response };
  return { error: answer.error, response: answer.response };
}

function checkedBaseUrl(baseUrl: string): string {
  let url: URL;
  try {
    url = new URL(baseUrl);
  } catch {
    throw new TypeError(
      `\`baseUrl\` is the server's absolute URL (http://127.0.0.1:8080), not \`${String(baseUrl)}\``,
    );
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new TypeError(`\`baseUrl\` is an http: or https: URL, not \`${baseUrl}\``);
  }
  if (url.search !== "" || url.hash !== "") {
    throw new TypeError(`\`baseUrl\` has no query or fragment: \`${baseUrl}\``);
  }
  // The paths of the document start with a slash.
  return url.href.replace(/\/+$/, "");
}

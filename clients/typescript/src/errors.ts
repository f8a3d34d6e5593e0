import type { components } from "./schema.js";

/** The body of every error answer of the API: `{"error": {"code": ..., "message": ...}}`. */
export type ErrorBody = components["schemas"]["ErrorBody"];

/**
 * An answer of the API that is not a success, thrown by {@link dataOrThrow} and by the
 * event iterators. `code` is the API's stable code (`unauthorized`, `not_found`,
 * `conflict`, ...: docs/http-api.md, "Errors"), `message` its words for a person.
 */
export class ApiError extends Error {
  override readonly name = "ApiError";

  constructor(
    /** The HTTP status. */
    readonly status: number,
    /** The API's code, or `http_<status>` for an answer not in the API's shape (a proxy's). */
    readonly code: string,
    message: string,
    /** The error body as the server sent it, when it was the API's shape. */
    readonly body: ErrorBody | undefined,
    /** `Retry-After` in seconds, on a `429` or `503`. */
    readonly retryAfterSeconds: number | undefined,
  ) {
    super(message);
  }

  /** The error an answer that is not a success stands for, from its parsed body. */
  static fromAnswer(response: Response, parsedBody: unknown): ApiError {
    const retryAfter = Number(response.headers.get("retry-after") ?? Number.NaN);
    const retryAfterSeconds = Number.isFinite(retryAfter) ? retryAfter : undefined;
    if (isErrorBody(parsedBody)) {
      return new ApiError(
        response.status,
        parsedBody.error.code,
        parsedBody.error.message,
        parsedBody,
        retryAfterSeconds,
      );
    }
    const text = typeof parsedBody === "string" && parsedBody !== "" ? `: ${parsedBody}` : "";
    return new ApiError(
      response.status,
      `http_${response.status}`,
      `${response.status} ${response.statusText}${text}`.slice(0, 500),
      undefined,
      retryAfterSeconds,
    );
  }
}

function isErrorBody(value: unknown): value is ErrorBody {
  if (typeof value !== "object" || value === null || !("error" in value)) return false;
  const detail = (value as { error: unknown }).error;
  return (
    typeof detail === "object" &&
    detail !== null &&
    typeof (detail as { code?: unknown }).code === "string" &&
    typeof (detail as { message?: unknown }).message === "string"
  );
}

/**
 * The data of an operation's answer, or its {@link ApiError} thrown: for code that would
 * rather `try`/`catch` than check `error` after every call.
 *
 * ```ts
 * const run = dataOrThrow(await client.api.GET("/v1/runs/{id}", { params: { path: { id } } }));
 * ```
 */
export function dataOrThrow<Data, Error>(
  answer:
    | { data: Data; error?: never; response: Response }
    | { data?: never; error: Error; response: Response },
): Data {
  if (answer.error !== undefined || !answer.response.ok) {
    throw ApiError.fromAnswer(answer.response, answer.error);
  }
  return answer.data as Data;
}

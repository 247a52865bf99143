/**
 * The idempotency scenario's constants and wire helpers: the extension's ids,
 * the fixture tools' names, each check's identity, and the calls and
 * comparisons every check makes. The checks themselves are in
 * idempotency-checks.ts, the scenario that runs them in idempotency.ts.
 */

import type { ConformanceCheck, SpecReference } from '../../types';
import { JsonRpcError, type Connection } from '../../connection';

/**
 * The spec pull request that proposes the extension (SEP numbers are PR
 * numbers). XXXX is a placeholder until that PR is open; the check ids and
 * src/seps/sep-3182.yaml take its number then.
 */
export const SEP_REF: SpecReference = {
  id: 'SEP-XXXX',
  url: 'https://github.com/modelcontextprotocol/modelcontextprotocol/pull/XXXX'
};

/**
 * The ids are the extension's official ones. A server that implements the
 * extension under its own vendor prefix, as drafts do before adoption, is run
 * with MCP_CONFORMANCE_IDEMPOTENCY_PREFIX set to that prefix.
 */
const PREFIX =
  process.env.MCP_CONFORMANCE_IDEMPOTENCY_PREFIX ?? 'io.modelcontextprotocol';
export const IDEMPOTENCY_EXTENSION_ID = `${PREFIX}/idempotency`;
export const IDEMPOTENCY_KEY_META = `${PREFIX}/idempotencyKey`;

export const CHARGE_TOOL = 'test_idempotent_charge';
export const COUNT_TOOL = 'test_idempotent_charge_count';
/** A name no server lists: calling it is the "unknown tool" JSON-RPC error. */
export const UNKNOWN_TOOL = 'test_idempotent_no_such_tool';

export const INVALID_PARAMS = -32602;
export const SLOW_SECONDS = 2; // long enough for a repeat to arrive while it runs
export const SETTLE_MS = 500; // the repeat leaves this long after the original
/**
 * 2^53 + 1 and 2^53: the first integer a double cannot hold, and the double it
 * rounds to. Written digit for digit, so the server's parser sees both as sent.
 */
export const PAST_DOUBLE = '9007199254740993';
export const ROUNDED = '9007199254740992';

/** A check's identity: the same whether it passes, fails or cannot run. */
type CheckSpec = { id: string; name: string; description: string };

export const CAPABILITY: CheckSpec = {
  id: 'sep-3182-capability-advertised',
  name: 'IdempotencyCapabilityAdvertised',
  description: `Server advertises ${IDEMPOTENCY_EXTENSION_ID} under capabilities.extensions, each setting a positive integer, and states retentionSeconds, deadlineSeconds and leaseSeconds (SHOULD)`
};
export const REPEAT: CheckSpec = {
  id: 'sep-3182-repeat-replays-outcome',
  name: 'IdempotencyRepeatReplaysOutcome',
  description:
    'A repeat of a finished keyed call gets its recorded outcome, as recorded even after the state it reports changed, and the tool runs once'
};
export const CONFLICT: CheckSpec = {
  id: 'sep-3182-conflict-rejected',
  name: 'IdempotencyConflictRejected',
  description:
    'The key with other arguments is rejected as idempotency_key_conflict, nothing runs, and the rejection leaves the record as it was'
};
export const IN_PROGRESS: CheckSpec = {
  id: 'sep-3182-in-progress-rejected',
  name: 'IdempotencyInProgressRejected',
  description:
    'A repeat of a running keyed call is rejected at once as idempotency_key_in_progress, the tool runs once, and the rejection leaves the record to its outcome'
};
export const INVALID_KEY: CheckSpec = {
  id: 'sep-3182-invalid-key-rejected',
  name: 'IdempotencyInvalidKeyRejected',
  description:
    'An empty, non-string or over-long key is rejected as invalid_idempotency_key before the tool runs, and not echoed'
};
export const NO_KEY: CheckSpec = {
  id: 'sep-3182-no-key-runs-every-time',
  name: 'IdempotencyNoKeyRunsEveryTime',
  description:
    'Identical calls without a key, or with a null key, each run as without the extension'
};
export const ELSEWHERE: CheckSpec = {
  id: 'sep-3182-key-elsewhere-ignored',
  name: 'IdempotencyKeyElsewhereIgnored',
  description:
    "A member named like the key inside arguments, or in another method's _meta, is not a key"
};
export const INTEGERS: CheckSpec = {
  id: 'sep-3182-integers-compared-exactly',
  name: 'IdempotencyIntegersComparedExactly',
  description:
    'An integer past 2^53 is compared exactly (the one it rounds to is a conflict), or the keyed call is refused with -32602'
};
export const READ_ONLY: CheckSpec = {
  id: 'sep-3182-read-only-tool-deduplicated',
  name: 'IdempotencyReadOnlyToolDeduplicated',
  description:
    'A keyed call to a tool annotated read-only is deduplicated too: its repeat gets the recorded answer, not a fresh one'
};
export const FAILURE_RECORDED: CheckSpec = {
  id: 'sep-3182-failed-outcome-recorded',
  name: 'IdempotencyFailedOutcomeRecorded',
  description:
    "A keyed call's failure (arguments the tool's schema refuses, an unknown tool) is recorded: the key with a valid call is a conflict"
};
export const ACKNOWLEDGED: CheckSpec = {
  id: 'sep-3182-result-acknowledged',
  name: 'IdempotencyResultAcknowledged',
  description: `Every result of a claimed keyed call names its key in _meta["${IDEMPOTENCY_EXTENSION_ID}"], and a replay carries it as the first answer did`
};
/** The checks that call the fixture tools. */
export const BEHAVIOUR_CHECKS = [
  REPEAT,
  CONFLICT,
  IN_PROGRESS,
  INVALID_KEY,
  NO_KEY,
  ELSEWHERE,
  INTEGERS,
  READ_ONLY,
  FAILURE_RECORDED,
  ACKNOWLEDGED
];

type CallResult = {
  content?: unknown[];
  isError?: boolean;
  structuredContent?: Record<string, unknown>;
  _meta?: Record<string, unknown>;
};

/** A tools/call's answer: its result, or the JSON-RPC error it got. */
type Answer = { result?: CallResult; error?: JsonRpcError };

/**
 * The check's result, severity following the SEP's keyword: FAILURE when a
 * MUST is broken (`errors`), else WARNING when only a SHOULD is (`warnings`),
 * else SUCCESS; the messages joined.
 */
export function check(
  spec: CheckSpec,
  errors: string[],
  details: Record<string, unknown>,
  warnings: string[] = []
): ConformanceCheck {
  const messages = [...errors, ...warnings];
  return {
    ...spec,
    status:
      errors.length > 0
        ? 'FAILURE'
        : warnings.length > 0
          ? 'WARNING'
          : 'SUCCESS',
    timestamp: new Date().toISOString(),
    errorMessage: messages.length > 0 ? messages.join('; ') : undefined,
    specReferences: [SEP_REF],
    details
  };
}

/** A fresh key, as a client mints one per logical call. */
export function newKey(): string {
  return crypto.randomUUID();
}

/** Call a tool, keyed when `key` is given, and keep an error as the answer. */
export async function callTool(
  conn: Connection,
  name: string,
  args: Record<string, unknown>,
  key?: unknown
): Promise<Answer> {
  const params: Record<string, unknown> = { name, arguments: args };
  if (key !== undefined) params._meta = { [IDEMPOTENCY_KEY_META]: key };
  try {
    return { result: (await conn.request('tools/call', params)) as CallResult };
  } catch (error) {
    if (error instanceof JsonRpcError) return { error };
    throw error;
  }
}

/** Call the charge fixture, keyed when `key` is given, and keep an error as the answer. */
export async function charge(
  conn: Connection,
  amount: unknown,
  key?: unknown,
  seconds = 0
): Promise<Answer> {
  return callTool(conn, CHARGE_TOOL, { amount, seconds }, key);
}

/**
 * An integer JSON.stringify writes as these digits, however large: a JS number
 * cannot hold 2^53 + 1, so it travels as raw JSON (JSON.rawJSON, Node.js 21+).
 */
export function exactInteger(digits: string): unknown {
  const raw = (JSON as unknown as { rawJSON?: (text: string) => unknown })
    .rawJSON;
  if (raw === undefined) {
    throw new Error(
      'sending an integer past 2^53 needs JSON.rawJSON (Node.js 21 or later)'
    );
  }
  return raw(digits);
}

/** How many charges have run: structuredContent.charges, or the first text as an integer. */
export async function chargeCount(conn: Connection): Promise<number> {
  const result = (await conn.request('tools/call', {
    name: COUNT_TOOL,
    arguments: {}
  })) as CallResult;
  const structured = result.structuredContent?.charges;
  if (typeof structured === 'number') return structured;
  const first = result.content?.[0] as { text?: string } | undefined;
  const parsed = Number(first?.text);
  if (!Number.isInteger(parsed)) {
    throw new Error(
      `${COUNT_TOOL} answered no count: ${JSON.stringify(result)}`
    );
  }
  return parsed;
}

/** Each rejection's data.retryable, as the SEP's table of errors gives it. */
const RETRYABLE: Record<string, boolean> = {
  idempotency_key_conflict: false,
  idempotency_key_in_progress: true,
  invalid_idempotency_key: false
};

/**
 * What is wrong with a rejection that should be -32602 with data.type `type`,
 * its data.retryable, and data.idempotencyKey `key` (none for an invalid key).
 */
export function rejectionProblem(
  answer: Answer,
  type: string,
  key?: string
): string | undefined {
  if (!answer.error) {
    return `expected a -32602 error with data.type "${type}"; got a result ${JSON.stringify(answer.result)}`;
  }
  const data = answer.error.data as
    | { type?: unknown; retryable?: unknown; idempotencyKey?: unknown }
    | undefined;
  const expected = { type, retryable: RETRYABLE[type], idempotencyKey: key };
  if (
    answer.error.code !== INVALID_PARAMS ||
    data?.type !== type ||
    data?.retryable !== expected.retryable ||
    (key !== undefined && data?.idempotencyKey !== key)
  ) {
    return `expected -32602 with data ${JSON.stringify(expected)}; got ${answer.error.code} with data ${JSON.stringify(answer.error.data)}`;
  }
  return undefined;
}

/** Whether a repeat got the outcome the first call got. */
export function sameOutcome(first: Answer, second: Answer): boolean {
  return JSON.stringify(outcomeOf(first)) === JSON.stringify(outcomeOf(second));
}

/** The parts of an answer a replay must repeat: content, structuredContent and isError, or the error's code and data. */
export function outcomeOf(answer: Answer): unknown {
  if (answer.error) return { code: answer.error.code, data: answer.error.data };
  return {
    content: answer.result?.content,
    structuredContent: answer.result?.structuredContent,
    isError: answer.result?.isError
  };
}

/** The acknowledgement a result carries: its _meta member under the extension's identifier. */
export function acknowledgementOf(answer: Answer): unknown {
  return answer.result?._meta?.[IDEMPOTENCY_EXTENSION_ID];
}

/** What is wrong with a result's acknowledgement of `key`; undefined when it names the key. */
export function acknowledgementProblem(
  what: string,
  answer: Answer,
  key: string
): string | undefined {
  if (!answer.result) return undefined; // a JSON-RPC error outcome is left as it is
  const ack = acknowledgementOf(answer) as
    | { idempotencyKey?: unknown }
    | undefined;
  if (typeof ack !== 'object' || ack === null || ack.idempotencyKey !== key) {
    return `${what}: the result MUST carry _meta["${IDEMPOTENCY_EXTENSION_ID}"] naming the key, {"idempotencyKey": ${JSON.stringify(key)}}; got ${JSON.stringify(ack)}`;
  }
  return undefined;
}

/** A result that is not a tool error. */
export function succeeded(answer: Answer): boolean {
  return answer.result !== undefined && answer.result.isError !== true;
}

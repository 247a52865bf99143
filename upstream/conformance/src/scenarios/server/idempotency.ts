/**
 * SEP-3182 Request Idempotency extension — server conformance.
 *
 * A client mints a key for one logical `tools/call` and sends it, unchanged on
 * every attempt, in the request's `_meta` under the extension's key. A server
 * that declares the extension runs the tool once per key: it replays a
 * finished call's outcome, rejects the key with other arguments as a
 * conflict, and rejects a repeat of a running call at once as in progress.
 *
 * The checks count a side effect, so the server under test exposes two
 * fixture tools: a charge whose every execution is counted, and a read of
 * that count.
 *
 * Not covered here: keys scoped per principal (a server scenario connects
 * with no credential, so it cannot speak as two principals), nor the window,
 * the store's bound or several instances, which need a server started
 * differently.
 */

import type {
  ClientScenario,
  ConformanceCheck,
  SpecReference
} from '../../types';
import {
  JsonRpcError,
  type Connection,
  type RunContext
} from '../../connection';
import { untestableCheck } from '../untestable';

/**
 * The spec pull request that proposes the extension (SEP numbers are PR
 * numbers). XXXX is a placeholder until that PR is open; the check ids and
 * src/seps/sep-3182.yaml take its number then.
 */
const SEP_REF: SpecReference = {
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

const INVALID_PARAMS = -32602;
const DEFAULT_MAX_KEY_LENGTH = 255; // the SEP's maxKeyLength when the settings state none
const SLOW_SECONDS = 2; // long enough for a repeat to arrive while it runs
const SETTLE_MS = 500; // the repeat leaves this long after the original

/** A check's identity: the same whether it passes, fails or cannot run. */
type CheckSpec = { id: string; name: string; description: string };

const CAPABILITY: CheckSpec = {
  id: 'sep-3182-capability-advertised',
  name: 'IdempotencyCapabilityAdvertised',
  description: `Server advertises ${IDEMPOTENCY_EXTENSION_ID} under capabilities.extensions, with well-formed settings`
};
const REPEAT: CheckSpec = {
  id: 'sep-3182-repeat-replays-outcome',
  name: 'IdempotencyRepeatReplaysOutcome',
  description:
    'A repeat of a finished keyed call gets its recorded outcome, and the tool runs once'
};
const CONFLICT: CheckSpec = {
  id: 'sep-3182-conflict-rejected',
  name: 'IdempotencyConflictRejected',
  description:
    'The key with other arguments is rejected as idempotency_key_conflict, and nothing runs'
};
const IN_PROGRESS: CheckSpec = {
  id: 'sep-3182-in-progress-rejected',
  name: 'IdempotencyInProgressRejected',
  description:
    'A repeat of a running keyed call is rejected at once as idempotency_key_in_progress, and the tool runs once'
};
const INVALID_KEY: CheckSpec = {
  id: 'sep-3182-invalid-key-rejected',
  name: 'IdempotencyInvalidKeyRejected',
  description:
    'An empty, non-string or over-long key is rejected as invalid_idempotency_key before the tool runs, and not echoed'
};
const NO_KEY: CheckSpec = {
  id: 'sep-3182-no-key-runs-every-time',
  name: 'IdempotencyNoKeyRunsEveryTime',
  description:
    'Identical calls without a key, or with a null key, each run as without the extension'
};
/** The checks that call the fixture tools. */
const BEHAVIOUR_CHECKS = [REPEAT, CONFLICT, IN_PROGRESS, INVALID_KEY, NO_KEY];

type CallResult = {
  content?: unknown[];
  isError?: boolean;
  structuredContent?: Record<string, unknown>;
};

/** A tools/call's answer: its result, or the JSON-RPC error it got. */
type Answer = { result?: CallResult; error?: JsonRpcError };

/** The check's result: SUCCESS without errors, else `severity` with them joined. */
function check(
  spec: CheckSpec,
  errors: string[],
  severity: 'FAILURE' | 'WARNING',
  details: Record<string, unknown>
): ConformanceCheck {
  return {
    ...spec,
    status: errors.length === 0 ? 'SUCCESS' : severity,
    timestamp: new Date().toISOString(),
    errorMessage: errors.length > 0 ? errors.join('; ') : undefined,
    specReferences: [SEP_REF],
    details
  };
}

/** A fresh key, as a client mints one per logical call. */
function newKey(): string {
  return crypto.randomUUID();
}

/** Call the charge fixture, keyed when `key` is given, and keep an error as the answer. */
async function charge(
  conn: Connection,
  amount: number,
  key?: unknown,
  seconds = 0
): Promise<Answer> {
  const params: Record<string, unknown> = {
    name: CHARGE_TOOL,
    arguments: { amount, seconds }
  };
  if (key !== undefined) params._meta = { [IDEMPOTENCY_KEY_META]: key };
  try {
    return { result: (await conn.request('tools/call', params)) as CallResult };
  } catch (error) {
    if (error instanceof JsonRpcError) return { error };
    throw error;
  }
}

/** How many charges have run: structuredContent.charges, or the first text as an integer. */
async function chargeCount(conn: Connection): Promise<number> {
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
function rejectionProblem(
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
function sameOutcome(first: Answer, second: Answer): boolean {
  return JSON.stringify(outcomeOf(first)) === JSON.stringify(outcomeOf(second));
}

/** The parts of an answer a replay must repeat: content and isError, or the error's code and data. */
function outcomeOf(answer: Answer): unknown {
  if (answer.error) return { code: answer.error.code, data: answer.error.data };
  return { content: answer.result?.content, isError: answer.result?.isError };
}

/** A result that is not a tool error. */
function succeeded(answer: Answer): boolean {
  return answer.result !== undefined && answer.result.isError !== true;
}

/** What the SEP allows for a setting. */
function isPositiveInteger(value: unknown): boolean {
  return typeof value === 'number' && Number.isInteger(value) && value > 0;
}

export class IdempotencyScenario implements ClientScenario {
  name = 'idempotency';
  readonly source = {
    extensionId: 'io.modelcontextprotocol/idempotency'
  } as const;
  description = `Test the SEP-3182 Request Idempotency extension on \`tools/call\`.

**Server Implementation Requirements:**

- Advertise \`${IDEMPOTENCY_EXTENSION_ID}\` under \`capabilities.extensions\` as an
  object (\`{}\` declares support with no setting stated); \`maxKeyLength\` and
  \`retentionSeconds\`, where present, are positive integers.
- A \`tools/call\` whose \`_meta["${IDEMPOTENCY_KEY_META}"]\` is a key already used with
  equivalent arguments, and finished, MUST get the recorded outcome; the tool runs once.
- The key with other arguments MUST be rejected: -32602, \`data.type\`
  \`"idempotency_key_conflict"\`, \`data.retryable\` false; the tool does not run.
- A repeat while the first call runs MUST be rejected at once: -32602, \`data.type\`
  \`"idempotency_key_in_progress"\`, \`data.retryable\` true; the tool runs once.
- A key that is not a string of 1 to \`maxKeyLength\` (255 when not stated) characters
  MUST be rejected before the tool runs: -32602, \`data.type\`
  \`"invalid_idempotency_key"\`, \`data.retryable\` false, the value not echoed.
- Every rejection but an invalid key's carries the key in \`data.idempotencyKey\`.
- A call without a key, or with a \`null\` key, runs every time.

A server implementing the extension under its own vendor prefix is run with
\`MCP_CONFORMANCE_IDEMPOTENCY_PREFIX=<prefix>\` (the ids become \`<prefix>/idempotency\`
and \`<prefix>/idempotencyKey\`).

**Required server fixtures (\`tools/list\` MUST include both):**
- \`${CHARGE_TOOL}\` — arguments \`{ amount: integer > 0, seconds: number }\`; waits
  \`seconds\`, then counts one charge; honours the key.
- \`${COUNT_TOOL}\` — no arguments; answers the number of charges run, as
  \`structuredContent.charges\` or as its first text.`;

  async run(ctx: RunContext): Promise<ConformanceCheck[]> {
    const conn = await ctx.connect();
    try {
      const advertised = await this.capabilityAdvertised(conn);
      // The rules bind a server that declares the extension; one that does not
      // may run a keyed call again, so the other checks do not apply.
      if (!this.declared) return [advertised, ...this.notApplicable()];
      const missing = await this.missingFixtures(conn);
      if (missing) return [advertised, ...this.untestable(missing)];
      return [
        advertised,
        await this.repeatReplaysOutcome(conn),
        await this.conflictRejected(conn),
        await this.inProgressRejected(conn),
        await this.invalidKeyRejected(conn),
        await this.noKeyRunsEveryTime(conn)
      ];
    } finally {
      await conn.close().catch(() => {});
    }
  }

  private declared = false;
  private settings: Record<string, unknown> = {};

  /** The extension is an object under capabilities.extensions, with well-formed settings. */
  private async capabilityAdvertised(
    conn: Connection
  ): Promise<ConformanceCheck> {
    const discovered = await conn.discover();
    const caps = (discovered.capabilities ?? {}) as {
      extensions?: Record<string, unknown>;
    };
    const declared = caps.extensions?.[IDEMPOTENCY_EXTENSION_ID];
    this.declared = declared !== undefined;
    this.settings = (declared ?? {}) as Record<string, unknown>;
    const errors: string[] = [];
    if (
      typeof declared !== 'object' ||
      declared === null ||
      Array.isArray(declared)
    ) {
      errors.push(
        `capabilities.extensions["${IDEMPOTENCY_EXTENSION_ID}"] MUST be an object; got ${JSON.stringify(declared)}`
      );
    }
    for (const setting of ['maxKeyLength', 'retentionSeconds']) {
      if (
        setting in this.settings &&
        !isPositiveInteger(this.settings[setting])
      ) {
        errors.push(
          `${setting} MUST be a positive integer; got ${JSON.stringify(this.settings[setting])}`
        );
      }
    }
    return check(CAPABILITY, errors, 'FAILURE', { declared });
  }

  /** The longest key the server takes: its maxKeyLength where well-formed, else the SEP's default. */
  private maxKeyLength(): number {
    const stated = this.settings.maxKeyLength;
    return isPositiveInteger(stated)
      ? (stated as number)
      : DEFAULT_MAX_KEY_LENGTH;
  }

  /** The fixture tools this server lacks, named; undefined when both are listed. */
  private async missingFixtures(conn: Connection): Promise<string | undefined> {
    const listed = (await conn.request('tools/list', {})) as {
      tools?: Array<{ name: string }>;
    };
    const names = new Set((listed.tools ?? []).map((tool) => tool.name));
    const missing = [CHARGE_TOOL, COUNT_TOOL].filter(
      (name) => !names.has(name)
    );
    return missing.length > 0
      ? `server does not list the fixture tool(s) ${missing.join(', ')}`
      : undefined;
  }

  /** A missing fixture fails each check it would have run, naming it (the suite's rule). */
  private untestable(reason: string): ConformanceCheck[] {
    return BEHAVIOUR_CHECKS.map(({ id, name, description }) =>
      untestableCheck(id, name, description, reason, [SEP_REF])
    );
  }

  /** A server that does not declare the extension owes none of its behaviour. */
  private notApplicable(): ConformanceCheck[] {
    return BEHAVIOUR_CHECKS.map((spec) => ({
      ...spec,
      status: 'SKIPPED',
      timestamp: new Date().toISOString(),
      specReferences: [SEP_REF],
      details: {
        reason: `the server does not declare ${IDEMPOTENCY_EXTENSION_ID}`
      }
    }));
  }

  /** A repeat of a finished call gets the recorded outcome, and the tool runs once. */
  private async repeatReplaysOutcome(
    conn: Connection
  ): Promise<ConformanceCheck> {
    const key = newKey();
    const before = await chargeCount(conn);
    const first = await charge(conn, 100, key);
    const repeat = await charge(conn, 100, key);
    const ran = (await chargeCount(conn)) - before;
    const errors: string[] = [];
    if (!succeeded(first))
      errors.push(
        `the keyed charge failed: ${JSON.stringify(outcomeOf(first))}`
      );
    if (!sameOutcome(first, repeat)) {
      errors.push(
        `the repeat MUST get the recorded outcome ${JSON.stringify(outcomeOf(first))}; got ${JSON.stringify(outcomeOf(repeat))}`
      );
    }
    if (ran !== 1)
      errors.push(`the tool MUST run once for the key; it ran ${ran} times`);
    return check(REPEAT, errors, 'FAILURE', { ran });
  }

  /** The key with other arguments is a conflict, and the tool does not run with them. */
  private async conflictRejected(conn: Connection): Promise<ConformanceCheck> {
    const key = newKey();
    await charge(conn, 100, key);
    const before = await chargeCount(conn);
    const other = await charge(conn, 200, key);
    const ran = (await chargeCount(conn)) - before;
    const errors: string[] = [];
    const problem = rejectionProblem(other, 'idempotency_key_conflict', key);
    if (problem) errors.push(problem);
    if (ran !== 0)
      errors.push(
        `the tool MUST NOT run with the other arguments; it ran ${ran} times`
      );
    return check(CONFLICT, errors, 'FAILURE', { ran });
  }

  /** A repeat while the first call runs is rejected at once, before the first finishes. */
  private async inProgressRejected(
    conn: Connection
  ): Promise<ConformanceCheck> {
    const key = newKey();
    const before = await chargeCount(conn);
    const started = Date.now();
    const original = charge(conn, 100, key, SLOW_SECONDS);
    await new Promise((resolve) => setTimeout(resolve, SETTLE_MS));
    const repeat = await charge(conn, 100, key, SLOW_SECONDS);
    const answeredAfterMs = Date.now() - started;
    const first = await original;
    const ran = (await chargeCount(conn)) - before;
    const errors: string[] = [];
    const problem = rejectionProblem(
      repeat,
      'idempotency_key_in_progress',
      key
    );
    if (problem) errors.push(problem);
    if (answeredAfterMs >= SLOW_SECONDS * 1000) {
      errors.push(
        `the repeat MUST be answered at once; it was answered ${answeredAfterMs} ms after the original started, which takes ${SLOW_SECONDS} s`
      );
    }
    if (!succeeded(first))
      errors.push(`the original failed: ${JSON.stringify(outcomeOf(first))}`);
    if (ran !== 1)
      errors.push(`the tool MUST run once for the key; it ran ${ran} times`);
    return check(IN_PROGRESS, errors, 'FAILURE', { ran, answeredAfterMs });
  }

  /** Values that are not keys are refused before the tool runs, and not echoed. */
  private async invalidKeyRejected(
    conn: Connection
  ): Promise<ConformanceCheck> {
    const tooLong = 'k'.repeat(this.maxKeyLength() + 1);
    const values: Array<[string, unknown]> = [
      ['an empty string', ''],
      ['a number', 42],
      ['an object', { key: 'value' }],
      [`a string of ${tooLong.length} characters`, tooLong]
    ];
    const before = await chargeCount(conn);
    const errors: string[] = [];
    for (const [what, value] of values) {
      const answer = await charge(conn, 100, value);
      const problem = rejectionProblem(answer, 'invalid_idempotency_key');
      if (problem) errors.push(`${what}: ${problem}`);
      else if (answer.error && JSON.stringify(answer.error).includes(tooLong)) {
        errors.push(`${what}: the rejection MUST NOT echo the value back`);
      }
    }
    const ran = (await chargeCount(conn)) - before;
    if (ran !== 0)
      errors.push(
        `the tool MUST NOT run for an invalid key; it ran ${ran} times`
      );
    return check(INVALID_KEY, errors, 'FAILURE', {
      ran,
      maxKeyLength: this.maxKeyLength()
    });
  }

  /** A call without a key, or with a null key, runs every time, as it would without the extension. */
  private async noKeyRunsEveryTime(
    conn: Connection
  ): Promise<ConformanceCheck> {
    const before = await chargeCount(conn);
    const answers = [
      await charge(conn, 100),
      await charge(conn, 100),
      await charge(conn, 100, null),
      await charge(conn, 100, null)
    ];
    const ran = (await chargeCount(conn)) - before;
    const errors: string[] = [];
    if (!answers.every(succeeded)) {
      errors.push(
        `calls without a key or with a null key MUST run as without the extension; got ${JSON.stringify(answers.map(outcomeOf))}`
      );
    }
    if (ran !== answers.length)
      errors.push(
        `${answers.length} calls without a key (two absent, two null) MUST each run; the tool ran ${ran} times`
      );
    return check(NO_KEY, errors, 'FAILURE', { ran });
  }
}

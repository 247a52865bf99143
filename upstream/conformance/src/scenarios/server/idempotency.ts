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
 * that count (annotated read-only, which changes nothing: a keyed call to it
 * is deduplicated all the same).
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
/** A name no server lists: calling it is the "unknown tool" JSON-RPC error. */
const UNKNOWN_TOOL = 'test_idempotent_no_such_tool';

const INVALID_PARAMS = -32602;
const DEFAULT_MAX_KEY_LENGTH = 255; // the SEP's maxKeyLength when the settings state none
const SLOW_SECONDS = 2; // long enough for a repeat to arrive while it runs
const SETTLE_MS = 500; // the repeat leaves this long after the original
/** The settings the SEP defines, each a positive integer where stated. */
const SETTINGS = [
  'maxKeyLength',
  'retentionSeconds',
  'deadlineSeconds',
  'leaseSeconds'
];
/** The settings a server SHOULD state (maxKeyLength has a default instead). */
const SHOULD_STATE = ['retentionSeconds', 'deadlineSeconds', 'leaseSeconds'];
/**
 * 2^53 + 1 and 2^53: the first integer a double cannot hold, and the double it
 * rounds to. Written digit for digit, so the server's parser sees both as sent.
 */
const PAST_DOUBLE = '9007199254740993';
const ROUNDED = '9007199254740992';

/** A check's identity: the same whether it passes, fails or cannot run. */
type CheckSpec = { id: string; name: string; description: string };

const CAPABILITY: CheckSpec = {
  id: 'sep-3182-capability-advertised',
  name: 'IdempotencyCapabilityAdvertised',
  description: `Server advertises ${IDEMPOTENCY_EXTENSION_ID} under capabilities.extensions, each setting a positive integer, and states retentionSeconds, deadlineSeconds and leaseSeconds (SHOULD)`
};
const REPEAT: CheckSpec = {
  id: 'sep-3182-repeat-replays-outcome',
  name: 'IdempotencyRepeatReplaysOutcome',
  description:
    'A repeat of a finished keyed call gets its recorded outcome, as recorded even after the state it reports changed, and the tool runs once'
};
const CONFLICT: CheckSpec = {
  id: 'sep-3182-conflict-rejected',
  name: 'IdempotencyConflictRejected',
  description:
    'The key with other arguments is rejected as idempotency_key_conflict, nothing runs, and the rejection leaves the record as it was'
};
const IN_PROGRESS: CheckSpec = {
  id: 'sep-3182-in-progress-rejected',
  name: 'IdempotencyInProgressRejected',
  description:
    'A repeat of a running keyed call is rejected at once as idempotency_key_in_progress, the tool runs once, and the rejection leaves the record to its outcome'
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
const ELSEWHERE: CheckSpec = {
  id: 'sep-3182-key-elsewhere-ignored',
  name: 'IdempotencyKeyElsewhereIgnored',
  description:
    "A member named like the key inside arguments, or in another method's _meta, is not a key"
};
const INTEGERS: CheckSpec = {
  id: 'sep-3182-integers-compared-exactly',
  name: 'IdempotencyIntegersComparedExactly',
  description:
    'An integer past 2^53 is compared exactly (the one it rounds to is a conflict), or the keyed call is refused with -32602'
};
const READ_ONLY: CheckSpec = {
  id: 'sep-3182-read-only-tool-deduplicated',
  name: 'IdempotencyReadOnlyToolDeduplicated',
  description:
    'A keyed call to a tool annotated read-only is deduplicated too: its repeat gets the recorded answer, not a fresh one'
};
const FAILURE_RECORDED: CheckSpec = {
  id: 'sep-3182-failed-outcome-recorded',
  name: 'IdempotencyFailedOutcomeRecorded',
  description:
    "A keyed call's failure (arguments the tool's schema refuses, an unknown tool) is recorded: the key with a valid call is a conflict"
};
const ACKNOWLEDGED: CheckSpec = {
  id: 'sep-3182-result-acknowledged',
  name: 'IdempotencyResultAcknowledged',
  description: `Every result of a claimed keyed call names its key in _meta["${IDEMPOTENCY_EXTENSION_ID}"], and a replay carries it as the first answer did`
};
/** The checks that call the fixture tools. */
const BEHAVIOUR_CHECKS = [
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
function check(
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
function newKey(): string {
  return crypto.randomUUID();
}

/** Call a tool, keyed when `key` is given, and keep an error as the answer. */
async function callTool(
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
async function charge(
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
function exactInteger(digits: string): unknown {
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

/** The parts of an answer a replay must repeat: content, structuredContent and isError, or the error's code and data. */
function outcomeOf(answer: Answer): unknown {
  if (answer.error) return { code: answer.error.code, data: answer.error.data };
  return {
    content: answer.result?.content,
    structuredContent: answer.result?.structuredContent,
    isError: answer.result?.isError
  };
}

/** The acknowledgement a result carries: its _meta member under the extension's identifier. */
function acknowledgementOf(answer: Answer): unknown {
  return answer.result?._meta?.[IDEMPOTENCY_EXTENSION_ID];
}

/** What is wrong with a result's acknowledgement of `key`; undefined when it names the key. */
function acknowledgementProblem(
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
  object (\`{}\` declares support with no setting stated); \`maxKeyLength\`,
  \`retentionSeconds\`, \`deadlineSeconds\` and \`leaseSeconds\`, where present, are
  positive integers. The last three SHOULD be stated (a WARNING when one is not).
- A \`tools/call\` whose \`_meta["${IDEMPOTENCY_KEY_META}"]\` is a key already used with
  equivalent arguments, and finished, MUST get the recorded outcome, as recorded even
  after the state it reports changed; the tool runs once. This holds for every tool,
  the read-only count included.
- The key with other arguments MUST be rejected: -32602, \`data.type\`
  \`"idempotency_key_conflict"\`, \`data.retryable\` false; the tool does not run.
  Integers compare exactly: 2^53 after 2^53 + 1 is other arguments, unless the server
  refused the first with -32602.
- A repeat while the first call runs MUST be rejected at once: -32602, \`data.type\`
  \`"idempotency_key_in_progress"\`, \`data.retryable\` true; the tool runs once.
- A rejection leaves the record as it was: the first request sent again still gets its
  outcome.
- Every outcome is recorded, a failure's too: after a keyed call whose arguments the
  schema refuses, or one to an unknown tool, the key with a valid charge is a conflict.
- Every result of a keyed call carries \`_meta["${IDEMPOTENCY_EXTENSION_ID}"]\`
  \`{"idempotencyKey": <key>}\`, and a replay carries it as the first answer did.
- A key that is not a string of 1 to \`maxKeyLength\` (255 when not stated) characters
  MUST be rejected before the tool runs: -32602, \`data.type\`
  \`"invalid_idempotency_key"\`, \`data.retryable\` false, the value not echoed.
- Every rejection but an invalid key's carries the key in \`data.idempotencyKey\`.
- A call without a key, or with a \`null\` key, runs every time; so does one whose key's
  name is a member of \`arguments\`, and another method's \`_meta\` holds no key.

A server implementing the extension under its own vendor prefix is run with
\`MCP_CONFORMANCE_IDEMPOTENCY_PREFIX=<prefix>\` (the ids become \`<prefix>/idempotency\`
and \`<prefix>/idempotencyKey\`).

**Required server fixtures (\`tools/list\` MUST include both):**
- \`${CHARGE_TOOL}\` — arguments \`{ amount: integer > 0, seconds: number }\`; waits
  \`seconds\`, then counts one charge; honours the key; answers \`isError\` for arguments
  its schema refuses (an \`amount\` that is not an integer) and ignores arguments it does
  not name; takes an \`amount\` past 2^53.
- \`${COUNT_TOOL}\` — no arguments, annotated \`readOnlyHint\`; answers the number of
  charges run, as \`structuredContent.charges\` or as its first text; honours the key.
- No tool named \`${UNKNOWN_TOOL}\`.`;

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
        await this.noKeyRunsEveryTime(conn),
        await this.keyElsewhereIgnored(conn),
        await this.integersComparedExactly(conn),
        await this.readOnlyToolDeduplicated(conn),
        await this.failedOutcomeRecorded(conn),
        await this.resultAcknowledged(conn)
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
    for (const setting of SETTINGS) {
      if (
        setting in this.settings &&
        !isPositiveInteger(this.settings[setting])
      ) {
        errors.push(
          `${setting} MUST be a positive integer; got ${JSON.stringify(this.settings[setting])}`
        );
      }
    }
    // A SHOULD: the object MAY be empty, so a missing setting warns, never fails.
    const unstated = SHOULD_STATE.filter(
      (setting) => this.declared && !(setting in this.settings)
    );
    const warnings =
      unstated.length > 0
        ? [
            `a server SHOULD state retentionSeconds, deadlineSeconds and leaseSeconds; it does not state ${unstated.join(', ')}`
          ]
        : [];
    return check(CAPABILITY, errors, { declared }, warnings);
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

  /**
   * A repeat of a finished call gets the recorded outcome, and the tool runs
   * once. A charge without a key runs between the two, so the count the first
   * answer reports is no longer the current one: the replay is the outcome as
   * recorded, not refreshed against the current state.
   */
  private async repeatReplaysOutcome(
    conn: Connection
  ): Promise<ConformanceCheck> {
    const key = newKey();
    const before = await chargeCount(conn);
    const first = await charge(conn, 100, key);
    const between = await charge(conn, 100);
    const repeat = await charge(conn, 100, key);
    const ran = (await chargeCount(conn)) - before - 1; // less the unkeyed charge
    const errors: string[] = [];
    if (!succeeded(first))
      errors.push(
        `the keyed charge failed: ${JSON.stringify(outcomeOf(first))}`
      );
    if (!sameOutcome(first, repeat)) {
      errors.push(
        `the repeat MUST get the outcome as it was recorded, ${JSON.stringify(outcomeOf(first))}, even after another charge changed the count; got ${JSON.stringify(outcomeOf(repeat))}`
      );
    }
    if (!succeeded(between))
      errors.push(
        `the charge without a key failed: ${JSON.stringify(outcomeOf(between))}`
      );
    if (ran !== 1)
      errors.push(`the tool MUST run once for the key; it ran ${ran} times`);
    return check(REPEAT, errors, { ran });
  }

  /**
   * The key with other arguments is a conflict, and the tool does not run with
   * them. The rejection is not recorded: the first request sent again still
   * gets its own outcome, not the conflict, and still does not run.
   */
  private async conflictRejected(conn: Connection): Promise<ConformanceCheck> {
    const key = newKey();
    const first = await charge(conn, 100, key);
    const before = await chargeCount(conn);
    const other = await charge(conn, 200, key);
    const ranOther = (await chargeCount(conn)) - before;
    const again = await charge(conn, 100, key);
    const ran = (await chargeCount(conn)) - before;
    const errors: string[] = [];
    const problem = rejectionProblem(other, 'idempotency_key_conflict', key);
    if (problem) errors.push(problem);
    if (ranOther !== 0)
      errors.push(
        `the tool MUST NOT run with the other arguments; it ran ${ranOther} times`
      );
    if (!sameOutcome(first, again)) {
      errors.push(
        `a rejection MUST leave the record as it was: the first request sent again after the conflict MUST get its outcome ${JSON.stringify(outcomeOf(first))}; got ${JSON.stringify(outcomeOf(again))}`
      );
    }
    if (ran !== ranOther)
      errors.push(
        `the first request sent again after the conflict MUST NOT run; it ran ${ran - ranOther} times`
      );
    return check(CONFLICT, errors, { ran });
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
    // The rejection is not recorded: once the first call ends, its outcome is the key's.
    const after = await charge(conn, 100, key, SLOW_SECONDS);
    const ran = (await chargeCount(conn)) - before;
    const errors: string[] = [];
    const problem = rejectionProblem(
      repeat,
      'idempotency_key_in_progress',
      key
    );
    if (problem) errors.push(problem);
    if (succeeded(first) && !sameOutcome(first, after)) {
      errors.push(
        `a rejection MUST leave the record as it was: a repeat after the first call ended MUST get its outcome ${JSON.stringify(outcomeOf(first))}; got ${JSON.stringify(outcomeOf(after))}`
      );
    }
    if (answeredAfterMs >= SLOW_SECONDS * 1000) {
      errors.push(
        `the repeat MUST be answered at once; it was answered ${answeredAfterMs} ms after the original started, which takes ${SLOW_SECONDS} s`
      );
    }
    if (!succeeded(first))
      errors.push(`the original failed: ${JSON.stringify(outcomeOf(first))}`);
    if (ran !== 1)
      errors.push(`the tool MUST run once for the key; it ran ${ran} times`);
    return check(IN_PROGRESS, errors, { ran, answeredAfterMs });
  }

  /** Values that are not keys are refused before the tool runs, and not echoed. */
  private async invalidKeyRejected(
    conn: Connection
  ): Promise<ConformanceCheck> {
    const tooLong = 'k'.repeat(this.maxKeyLength() + 1);
    const marker = `not-a-key-${newKey()}`; // found in an answer only if echoed
    const values: Array<[string, unknown]> = [
      ['an empty string', ''],
      ['a number', 42],
      ['an object', { key: marker }],
      [`a string of ${tooLong.length} characters`, tooLong]
    ];
    const before = await chargeCount(conn);
    const errors: string[] = [];
    for (const [what, value] of values) {
      const answer = await charge(conn, 100, value);
      const problem = rejectionProblem(answer, 'invalid_idempotency_key');
      if (problem) errors.push(`${what}: ${problem}`);
      else if (
        answer.error &&
        [tooLong, marker].some((sent) =>
          JSON.stringify(answer.error).includes(sent)
        )
      ) {
        errors.push(`${what}: the rejection MUST NOT echo the value back`);
      }
    }
    const ran = (await chargeCount(conn)) - before;
    if (ran !== 0)
      errors.push(
        `the tool MUST NOT run for an invalid key; it ran ${ran} times`
      );
    return check(INVALID_KEY, errors, {
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
    return check(NO_KEY, errors, { ran });
  }

  /**
   * The key is read in one place only, the tools/call request's _meta. An
   * invalid key value in another method's _meta is no key there, so the
   * method answers as usual; the key's member name inside `arguments` is an
   * argument like any other, so two such calls each run.
   */
  private async keyElsewhereIgnored(
    conn: Connection
  ): Promise<ConformanceCheck> {
    const errors: string[] = [];
    try {
      await conn.request('tools/list', {
        _meta: { [IDEMPOTENCY_KEY_META]: '' }
      });
    } catch (error) {
      if (!(error instanceof JsonRpcError)) throw error;
      errors.push(
        `tools/list with "" under _meta["${IDEMPOTENCY_KEY_META}"] MUST NOT be refused as a key; got ${error.code} with data ${JSON.stringify(error.data)}`
      );
    }
    const key = newKey();
    const args = { amount: 100, seconds: 0, [IDEMPOTENCY_KEY_META]: key };
    const before = await chargeCount(conn);
    const answers = [
      await callTool(conn, CHARGE_TOOL, args),
      await callTool(conn, CHARGE_TOOL, args)
    ];
    const ran = (await chargeCount(conn)) - before;
    if (!answers.every(succeeded) || ran !== answers.length) {
      errors.push(
        `two calls with the key's name as a member of arguments, and no key in _meta, MUST each run as calls without a key; the tool ran ${ran} times, answering ${JSON.stringify(answers.map(outcomeOf))}`
      );
    }
    return check(ELSEWHERE, errors, { ran });
  }

  /**
   * 2^53 + 1, then the same key with 2^53: a server that compares integers
   * exactly sees other arguments, a conflict; one that rounds both to the
   * same double would replay. A server whose parser cannot hold the first
   * MUST refuse it with -32602, which passes too.
   */
  private async integersComparedExactly(
    conn: Connection
  ): Promise<ConformanceCheck> {
    const key = newKey();
    const before = await chargeCount(conn);
    const first = await charge(conn, exactInteger(PAST_DOUBLE), key);
    const between = await chargeCount(conn);
    const rounded = await charge(conn, exactInteger(ROUNDED), key);
    const ran = (await chargeCount(conn)) - between;
    const refused = first.error?.code === INVALID_PARAMS;
    const errors: string[] = [];
    if (!refused && !first.result) {
      errors.push(
        `a keyed call with the integer ${PAST_DOUBLE} MUST run, or be refused with -32602; got ${JSON.stringify(outcomeOf(first))}`
      );
    } else if (!refused) {
      const problem = rejectionProblem(
        rounded,
        'idempotency_key_conflict',
        key
      );
      if (problem)
        errors.push(
          `integers MUST compare exactly: the key with ${ROUNDED} after ${PAST_DOUBLE} is a conflict; ${problem}`
        );
      if (ran !== 0)
        errors.push(
          `the tool MUST NOT run with ${ROUNDED} under the key of ${PAST_DOUBLE}; it ran ${ran} times`
        );
    }
    return check(INTEGERS, errors, {
      refused,
      firstRan: between - before,
      ran
    });
  }

  /**
   * The count fixture is annotated read-only, and is deduplicated all the
   * same: a keyed read, a charge that changes the count, then the keyed read
   * again, which gets the count first answered.
   */
  private async readOnlyToolDeduplicated(
    conn: Connection
  ): Promise<ConformanceCheck> {
    const listed = (await conn.request('tools/list', {})) as {
      tools?: Array<{ name: string; annotations?: unknown }>;
    };
    const annotations = listed.tools?.find(
      (tool) => tool.name === COUNT_TOOL
    )?.annotations;
    const key = newKey();
    const first = await callTool(conn, COUNT_TOOL, {}, key);
    const between = await charge(conn, 100);
    const repeat = await callTool(conn, COUNT_TOOL, {}, key);
    const errors: string[] = [];
    if (!succeeded(first) || !succeeded(between)) {
      errors.push(
        `the keyed read or the charge failed: ${JSON.stringify([first, between].map(outcomeOf))}`
      );
    } else if (!sameOutcome(first, repeat)) {
      errors.push(
        `every tool that receives a key MUST be deduplicated, whatever its annotations: the repeat of the keyed ${COUNT_TOOL} MUST get the recorded ${JSON.stringify(outcomeOf(first))}; got ${JSON.stringify(outcomeOf(repeat))}`
      );
    }
    return check(READ_ONLY, errors, { annotations });
  }

  /**
   * A keyed call's outcome is recorded whichever it is: a call whose
   * arguments the tool's input schema refuses (a tool execution error), and a
   * call to a tool the server does not have (a JSON-RPC error). The key with a
   * valid charge after either is then a conflict, and the charge does not run.
   */
  private async failedOutcomeRecorded(
    conn: Connection
  ): Promise<ConformanceCheck> {
    const failures: Array<[string, string, Record<string, unknown>]> = [
      [
        'arguments the input schema refuses',
        CHARGE_TOOL,
        { amount: 'not an integer', seconds: 0 }
      ],
      ['an unknown tool', UNKNOWN_TOOL, { amount: 100, seconds: 0 }]
    ];
    const errors: string[] = [];
    const outcomes: Record<string, unknown> = {};
    let ran = 0;
    for (const [what, name, args] of failures) {
      const key = newKey();
      outcomes[what] = outcomeOf(await callTool(conn, name, args, key));
      const before = await chargeCount(conn);
      const valid = await charge(conn, 100, key);
      const ranValid = (await chargeCount(conn)) - before;
      ran += ranValid;
      const problem = rejectionProblem(valid, 'idempotency_key_conflict', key);
      if (problem)
        errors.push(
          `${what}: the outcome MUST be recorded, so the key with a valid charge is a conflict; ${problem}`
        );
      if (ranValid !== 0)
        errors.push(
          `${what}: the charge MUST NOT run under a key whose outcome was recorded; it ran ${ranValid} times`
        );
    }
    return check(FAILURE_RECORDED, errors, { ran, outcomes });
  }

  /**
   * The result of a keyed call names its key in _meta under the extension's
   * identifier, a tool execution error's too; the replay carries the same
   * member, since it was recorded with the result.
   */
  private async resultAcknowledged(
    conn: Connection
  ): Promise<ConformanceCheck> {
    const key = newKey();
    const first = await charge(conn, 100, key);
    const repeat = await charge(conn, 100, key);
    const failedKey = newKey();
    const failed = await charge(conn, 'not an integer', failedKey);
    const errors: string[] = [];
    if (!succeeded(first))
      errors.push(
        `the keyed charge failed: ${JSON.stringify(outcomeOf(first))}`
      );
    for (const problem of [
      acknowledgementProblem('the keyed charge', first, key),
      acknowledgementProblem(
        'a keyed charge the input schema refuses',
        failed,
        failedKey
      )
    ]) {
      if (problem) errors.push(problem);
    }
    if (
      JSON.stringify(acknowledgementOf(repeat)) !==
      JSON.stringify(acknowledgementOf(first))
    ) {
      errors.push(
        `a replay MUST carry the acknowledgement exactly as the first answer did, ${JSON.stringify(acknowledgementOf(first))}; got ${JSON.stringify(acknowledgementOf(repeat))}`
      );
    }
    return check(ACKNOWLEDGED, errors, {
      acknowledgement: acknowledgementOf(first),
      replayed: acknowledgementOf(repeat)
    });
  }
}

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
 *
 * This file holds the scenario: the capability check, and the paths of a
 * server that does not declare the extension or lacks the fixtures. The
 * behaviour checks are in idempotency-checks.ts, the ids, constants and wire
 * helpers they share in idempotency-helpers.ts.
 */

import type { ClientScenario, ConformanceCheck } from '../../types';
import type { Connection, RunContext } from '../../connection';
import { untestableCheck } from '../untestable';
import {
  BEHAVIOUR_CHECKS,
  CAPABILITY,
  CHARGE_TOOL,
  COUNT_TOOL,
  IDEMPOTENCY_EXTENSION_ID,
  IDEMPOTENCY_KEY_META,
  SEP_REF,
  UNKNOWN_TOOL,
  check
} from './idempotency-helpers';
import {
  conflictRejected,
  failedOutcomeRecorded,
  inProgressRejected,
  integersComparedExactly,
  invalidKeyRejected,
  keyElsewhereIgnored,
  noKeyRunsEveryTime,
  readOnlyToolDeduplicated,
  repeatReplaysOutcome,
  resultAcknowledged
} from './idempotency-checks';

// The extension's ids and the fixture tools' names, for what serves the scenario.
export {
  CHARGE_TOOL,
  COUNT_TOOL,
  IDEMPOTENCY_EXTENSION_ID,
  IDEMPOTENCY_KEY_META
} from './idempotency-helpers';

const DEFAULT_MAX_KEY_LENGTH = 255; // the SEP's maxKeyLength when the settings state none
/** The settings the SEP defines, each a positive integer where stated. */
const SETTINGS = [
  'maxKeyLength',
  'retentionSeconds',
  'deadlineSeconds',
  'leaseSeconds'
];
/** The settings a server SHOULD state (maxKeyLength has a default instead). */
const SHOULD_STATE = ['retentionSeconds', 'deadlineSeconds', 'leaseSeconds'];

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
        await repeatReplaysOutcome(conn),
        await conflictRejected(conn),
        await inProgressRejected(conn),
        await invalidKeyRejected(conn, this.maxKeyLength()),
        await noKeyRunsEveryTime(conn),
        await keyElsewhereIgnored(conn),
        await integersComparedExactly(conn),
        await readOnlyToolDeduplicated(conn),
        await failedOutcomeRecorded(conn),
        await resultAcknowledged(conn)
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
}

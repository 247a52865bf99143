/**
 * SEP-3182 Request Idempotency fixtures for the everything-server's
 * stateless (2026-07-28) path.
 *
 * `test_idempotent_charge` counts every run; `test_idempotent_charge_count`
 * reads the count. Both honour the extension's key, the read-only count too:
 * a finished key is replayed with the acknowledgement its result was recorded
 * with, the key with other arguments is a conflict, a running key is in
 * progress, and a value that is not a key is refused before anything runs.
 * Every outcome of a keyed call is recorded: a charge whose arguments its
 * schema refuses (isError), and a call to an unknown tool under the fixtures'
 * prefix (a JSON-RPC error). One process, one principal: records live in
 * memory for the window below.
 */

export const IDEMPOTENCY_EXTENSION_ID = 'io.modelcontextprotocol/idempotency';
const IDEMPOTENCY_KEY_META = 'io.modelcontextprotocol/idempotencyKey';
// One process: a claim never outlives its holder, so the lease is never
// waited out; a charge waits `seconds`, which the scenario keeps far below
// the deadline.
export const IDEMPOTENCY_SETTINGS = {
  maxKeyLength: 255,
  retentionSeconds: 3600,
  deadlineSeconds: 60,
  leaseSeconds: 30
};

const FIXTURE_PREFIX = 'test_idempotent_';
const CHARGE_TOOL = 'test_idempotent_charge';
const COUNT_TOOL = 'test_idempotent_charge_count';

export const IDEMPOTENCY_FIXTURE_TOOLS = [
  {
    name: CHARGE_TOOL,
    description: 'SEP-3182: waits `seconds`, then counts one charge',
    inputSchema: {
      type: 'object',
      properties: {
        amount: { type: 'integer', minimum: 1 },
        seconds: { type: 'number', minimum: 0 }
      },
      required: ['amount']
    }
  },
  {
    name: COUNT_TOOL,
    description: 'SEP-3182: the number of charges run',
    inputSchema: { type: 'object', properties: {} },
    annotations: { readOnlyHint: true }
  }
];

type Outcome = {
  result?: Record<string, unknown>;
  error?: { code: number; message: string; data?: Record<string, unknown> };
};

type KeyRecord = {
  fingerprint: string;
  outcome?: Outcome;
  finishedAt?: number;
};

const records = new Map<string, KeyRecord>();
let charges = 0;

/**
 * The fixtures, and any other name under their prefix: a keyed call to a tool
 * that does not exist is answered, and recorded, here.
 */
export function isIdempotencyFixture(name: unknown): boolean {
  return typeof name === 'string' && name.startsWith(FIXTURE_PREFIX);
}

function rejection(type: string, retryable: boolean, key?: string): Outcome {
  return {
    error: {
      code: -32602,
      message: `idempotency: ${type}`,
      data: {
        type,
        retryable,
        ...(key === undefined ? {} : { idempotencyKey: key })
      }
    }
  };
}

/** The same JSON for equivalent arguments, whatever their member order. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const members = Object.keys(value as object)
      .sort()
      .map(
        (k) =>
          `${JSON.stringify(k)}:${canonical((value as Record<string, unknown>)[k])}`
      );
    return `{${members.join(',')}}`;
  }
  return JSON.stringify(value);
}

/**
 * Whether the arguments hold an integer JSON.parse may have rounded: past
 * 2^53 a double cannot hold every integer, so two that differ could compare
 * equal. The SEP has such a call refused rather than compared rounded.
 */
function holdsInexactInteger(value: unknown): boolean {
  if (typeof value === 'number')
    return Number.isInteger(value) && !Number.isSafeInteger(value);
  if (Array.isArray(value)) return value.some(holdsInexactInteger);
  if (value !== null && typeof value === 'object')
    return Object.values(value).some(holdsInexactInteger);
  return false;
}

/** Run one tool: the count, the charge, or the unknown tool's JSON-RPC error. */
async function runTool(
  name: unknown,
  args: Record<string, unknown>
): Promise<Outcome> {
  if (name === COUNT_TOOL) {
    return {
      result: {
        content: [{ type: 'text', text: String(charges) }],
        structuredContent: { charges }
      }
    };
  }
  if (name !== CHARGE_TOOL) {
    return { error: { code: -32602, message: `Unknown tool: ${name}` } };
  }
  const { amount, seconds } = args;
  if (
    !Number.isInteger(amount) ||
    (amount as number) < 1 ||
    (seconds !== undefined && (typeof seconds !== 'number' || seconds < 0))
  ) {
    // Arguments the input schema refuses: a tool execution error.
    return {
      result: {
        content: [
          {
            type: 'text',
            text: 'amount must be an integer of at least 1, seconds a number of at least 0'
          }
        ],
        isError: true
      }
    };
  }
  return runCharge(args);
}

async function runCharge(args: Record<string, unknown>): Promise<Outcome> {
  const seconds = typeof args.seconds === 'number' ? args.seconds : 0;
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  charges += 1;
  return {
    result: {
      content: [
        { type: 'text', text: `charged ${args.amount} (charge #${charges})` }
      ]
    }
  };
}

function live(record: KeyRecord | undefined): KeyRecord | undefined {
  const window = IDEMPOTENCY_SETTINGS.retentionSeconds * 1000;
  if (
    record?.finishedAt !== undefined &&
    Date.now() - record.finishedAt > window
  )
    return undefined;
  return record;
}

/**
 * A result names the key it was recorded under, in its _meta, so a replay
 * carries it as the first answer did; a JSON-RPC error is left as it is.
 */
function acknowledged(outcome: Outcome, key: string): Outcome {
  if (!outcome.result) return outcome;
  const meta = (outcome.result._meta ?? {}) as Record<string, unknown>;
  return {
    result: {
      ...outcome.result,
      _meta: { ...meta, [IDEMPOTENCY_EXTENSION_ID]: { idempotencyKey: key } }
    }
  };
}

/** Answer a tools/call to one of the fixtures, as a result or a JSON-RPC error. */
export async function callIdempotencyFixture(
  params: Record<string, unknown>
): Promise<Outcome> {
  const args = (params.arguments ?? {}) as Record<string, unknown>;
  const meta = (params._meta ?? {}) as Record<string, unknown>;
  const key = meta[IDEMPOTENCY_KEY_META];
  if (key === undefined || key === null) return runTool(params.name, args);
  if (
    typeof key !== 'string' ||
    key.length === 0 ||
    [...key].length > IDEMPOTENCY_SETTINGS.maxKeyLength
  ) {
    return rejection('invalid_idempotency_key', false); // never echoed
  }
  if (holdsInexactInteger(args)) {
    return {
      error: {
        code: -32602,
        message: 'an integer in arguments is too large to compare exactly'
      }
    };
  }
  const fingerprint = canonical({ name: params.name, arguments: args });
  const record = live(records.get(key));
  if (record && record.fingerprint !== fingerprint)
    return rejection('idempotency_key_conflict', false, key);
  if (record?.outcome) return record.outcome;
  if (record) return rejection('idempotency_key_in_progress', true, key);
  const claim: KeyRecord = { fingerprint };
  records.set(key, claim);
  claim.outcome = acknowledged(await runTool(params.name, args), key);
  claim.finishedAt = Date.now();
  return claim.outcome;
}

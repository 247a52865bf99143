/**
 * SEP-3182 Request Idempotency fixtures for the everything-server's
 * stateless (2026-07-28) path.
 *
 * `test_idempotent_charge` counts every run; `test_idempotent_charge_count`
 * reads the count. The charge honours the extension's key: a finished key is
 * replayed, the key with other arguments is a conflict, a running key is in
 * progress, and a value that is not a key is refused before anything runs.
 * One process, one principal: records live in memory for the window below.
 */

export const IDEMPOTENCY_EXTENSION_ID = 'io.modelcontextprotocol/idempotency';
const IDEMPOTENCY_KEY_META = 'io.modelcontextprotocol/idempotencyKey';
export const IDEMPOTENCY_SETTINGS = {
  maxKeyLength: 255,
  retentionSeconds: 3600
};

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

export function isIdempotencyFixture(name: unknown): boolean {
  return name === CHARGE_TOOL || name === COUNT_TOOL;
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

/** Answer a tools/call to one of the fixtures, as a result or a JSON-RPC error. */
export async function callIdempotencyFixture(
  params: Record<string, unknown>
): Promise<Outcome> {
  if (params.name === COUNT_TOOL) {
    return {
      result: {
        content: [{ type: 'text', text: String(charges) }],
        structuredContent: { charges }
      }
    };
  }
  const args = (params.arguments ?? {}) as Record<string, unknown>;
  const meta = (params._meta ?? {}) as Record<string, unknown>;
  const key = meta[IDEMPOTENCY_KEY_META];
  if (key === undefined || key === null) return runCharge(args);
  if (
    typeof key !== 'string' ||
    key.length === 0 ||
    [...key].length > IDEMPOTENCY_SETTINGS.maxKeyLength
  ) {
    return rejection('invalid_idempotency_key', false); // never echoed
  }
  const fingerprint = canonical({ name: params.name, arguments: args });
  const record = live(records.get(key));
  if (record && record.fingerprint !== fingerprint)
    return rejection('idempotency_key_conflict', false, key);
  if (record?.outcome) return record.outcome;
  if (record) return rejection('idempotency_key_in_progress', true, key);
  const claim: KeyRecord = { fingerprint };
  records.set(key, claim);
  claim.outcome = await runCharge(args);
  claim.finishedAt = Date.now();
  return claim.outcome;
}

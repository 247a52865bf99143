import { testContext } from '../../connection/testing';
import { spawn, ChildProcess } from 'child_process';
import path from 'path';
import { IdempotencyScenario } from './idempotency';
import { DRAFT_PROTOCOL_VERSION } from '../../types';

function startServer(scriptPath: string, port: number): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const isWindows = process.platform === 'win32';
    const proc = spawn('npx', ['tsx', scriptPath], {
      env: { ...process.env, PORT: port.toString() },
      stdio: ['ignore', 'pipe', 'pipe'],
      shell: isWindows,
      // Its own process group: npx starts tsx, which starts the server, and
      // signalling npx alone would leave those two running.
      detached: !isWindows
    });
    let stderr = '';
    proc.stderr?.on('data', (d) => (stderr += d.toString()));
    const timeout = setTimeout(() => {
      signalServer(proc, 'SIGKILL');
      reject(
        new Error(`Server ${scriptPath} failed to start within 30s: ${stderr}`)
      );
    }, 30000);
    proc.stdout?.on('data', (data) => {
      if (data.toString().includes('running on')) {
        clearTimeout(timeout);
        resolve(proc);
      }
    });
    proc.on('error', (err) => {
      clearTimeout(timeout);
      reject(err);
    });
  });
}

/** Signal the server's whole process group (npx, tsx and the server), or npx alone on Windows. */
function signalServer(proc: ChildProcess, signal: NodeJS.Signals): void {
  if (process.platform !== 'win32' && proc.pid) {
    try {
      process.kill(-proc.pid, signal);
      return;
    } catch {
      // the group is gone; fall through to the process itself
    }
  }
  proc.kill(signal);
}

function stopServer(proc: ChildProcess | null): Promise<void> {
  return new Promise((resolve) => {
    if (!proc || proc.exitCode !== null || proc.signalCode !== null)
      return resolve();
    const t = setTimeout(() => {
      signalServer(proc, 'SIGKILL');
      resolve();
    }, 5000);
    proc.once('exit', () => {
      clearTimeout(t);
      resolve();
    });
    signalServer(proc, 'SIGTERM');
  });
}

/** The checks of a keyed call: a server that ignores the key fails each. */
const KEYED = [
  'sep-3182-repeat-replays-outcome',
  'sep-3182-conflict-rejected',
  'sep-3182-in-progress-rejected',
  'sep-3182-invalid-key-rejected',
  'sep-3182-integers-compared-exactly',
  'sep-3182-read-only-tool-deduplicated',
  'sep-3182-failed-outcome-recorded',
  'sep-3182-result-acknowledged'
];
/** The checks a server that ignores every key passes, as it should. */
const UNKEYED = [
  'sep-3182-capability-advertised',
  'sep-3182-no-key-runs-every-time',
  'sep-3182-key-elsewhere-ignored'
];

async function runAgainst(port: number) {
  const checks = await new IdempotencyScenario().run(
    testContext(`http://localhost:${port}/mcp`, DRAFT_PROTOCOL_VERSION)
  );
  return new Map(checks.map((c) => [c.id, c.status]));
}

describe('idempotency (SEP-3182)', () => {
  describe('against the everything-server', () => {
    let serverProcess: ChildProcess | null = null;
    const PORT = 3010;

    beforeAll(async () => {
      serverProcess = await startServer(
        path.join(
          process.cwd(),
          'examples/servers/typescript/everything-server.ts'
        ),
        PORT
      );
    }, 35000);

    afterAll(async () => {
      await stopServer(serverProcess);
    });

    it('passes every check', async () => {
      const statuses = await runAgainst(PORT);
      expect(Object.fromEntries(statuses)).toEqual(
        Object.fromEntries([...UNKEYED, ...KEYED].map((id) => [id, 'SUCCESS']))
      );
    }, 20000);
  });

  describe('against a server that declares the extension and ignores the key', () => {
    let serverProcess: ChildProcess | null = null;
    const PORT = 3011;

    beforeAll(async () => {
      serverProcess = await startServer(
        path.join(
          process.cwd(),
          'examples/servers/typescript/sep-3182-ignores-idempotency-key.ts'
        ),
        PORT
      );
    }, 35000);

    afterAll(async () => {
      await stopServer(serverProcess);
    });

    it('emits FAILURE for every keyed check, and passes the rest', async () => {
      const statuses = await runAgainst(PORT);
      for (const id of KEYED) expect(statuses.get(id)).toBe('FAILURE');
      for (const id of UNKEYED) expect(statuses.get(id)).toBe('SUCCESS');
    }, 20000);
  });
});

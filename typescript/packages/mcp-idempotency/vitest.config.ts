import { defineConfig } from "vitest/config";

// Generous per-test limits: several tests start server processes, on machines that may be loaded. No test asserts a
// duration; a limit only ends a test that hangs.
export default defineConfig({ test: { testTimeout: 120_000, hookTimeout: 120_000 } });

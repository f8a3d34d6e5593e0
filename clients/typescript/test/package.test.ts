// The layout npm would publish (`npm pack --dry-run`, nothing written or sent): what
// `exports` and `types` name is packed, and nothing of the tests or the dependencies is.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { test } from "node:test";

interface PackedFile {
  path: string;
}

const manifest = JSON.parse(readFileSync("package.json", "utf8")) as {
  name: string;
  version: string;
  types: string;
  exports: Record<string, string | Record<string, string>>;
};

test("npm pack holds what package.json promises, and no more", () => {
  const [pack] = JSON.parse(
    execFileSync("npm", ["pack", "--dry-run", "--json", "--ignore-scripts"], {
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
    }),
  ) as Array<{ name: string; version: string; files: PackedFile[] }>;
  assert.ok(pack);
  assert.equal(pack.name, "durable-agents-client");
  assert.match(pack.version, /^\d+\.\d+\.\d+/);
  const files = new Set(pack.files.map((f) => f.path));

  const promised = [manifest.types];
  for (const target of Object.values(manifest.exports)) {
    promised.push(...(typeof target === "string" ? [target] : Object.values(target)));
  }
  for (const path of promised) {
    assert.ok(files.has(path.replace(/^\.\//, "")), `${path} is named in package.json but not packed`);
  }
  for (const path of ["README.md", "package.json", "dist/index.js", "dist/schema.d.ts", "src/schema.ts"]) {
    assert.ok(files.has(path), `${path} is not packed`);
  }
  const strays = [...files].filter((p) => /^(test|build-test|node_modules)\//.test(p) || p.endsWith(".tgz"));
  assert.deepEqual(strays, []);
});

test("the package's version is the workspace's: one release, one version", () => {
  const cargo = readFileSync("../../Cargo.toml", "utf8");
  const workspace = /^\[workspace\.package\][^[]*?^version\s*=\s*"([^"]+)"/m.exec(cargo);
  assert.ok(workspace, "Cargo.toml has a [workspace.package] version");
  assert.equal(manifest.version, workspace[1]);
});

test("a project that installs the packed tarball imports it, types included", { timeout: 120_000 }, () => {
  const scratch = mkdtempSync(join(tmpdir(), "durable-agents-client-"));
  try {
    const run = (command: string, args: string[], cwd: string) =>
      execFileSync(command, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    // What `npm publish` would upload. Without `prepare`: `npm test` built dist/ already,
    // and the other test files, run at the same time, import it.
    const [packed] = JSON.parse(
      run("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", scratch], "."),
    ) as Array<{ filename: string }>;
    assert.ok(packed);
    const app = join(scratch, "app");
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
    run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", join(scratch, packed.filename)], app);
    writeFileSync(
      join(app, "main.ts"),
      [
        'import { createClient, ApiError, type RunEvent } from "durable-agents-client";',
        'const client = createClient({ baseUrl: "http://127.0.0.1:1", token: process.env.NO_SUCH_TOKEN });',
        'const first: RunEvent["type"] = "run_created";',
        'console.log(typeof client.followRun, typeof client.api.GET, new ApiError(404, "not_found", "m", undefined, undefined).code, first);',
        "",
      ].join("\n"),
    );
    writeFileSync(
      join(app, "tsconfig.json"),
      JSON.stringify({
        // As strict as a user's project may be.
        compilerOptions: {
          module: "NodeNext",
          moduleResolution: "NodeNext",
          target: "ES2022",
          strict: true,
          exactOptionalPropertyTypes: true,
          lib: ["ES2022", "DOM"],
          types: ["node"],
          typeRoots: [resolve("node_modules/@types")],
          outDir: "out",
        },
        files: ["main.ts"],
      }),
    );
    run(process.execPath, [resolve("node_modules/typescript/bin/tsc"), "-p", "."], app);
    assert.equal(run(process.execPath, ["out/main.js"], app).trim(), "function function not_found run_created");
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
});

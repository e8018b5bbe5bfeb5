// Fails when src/openapi.d.ts differs from what `$SVC_BIN openapi` generates now, or when a route
// in src/routes.ts (method + path template) is missing from the server's document.
// Needs a build first (`npm run build`): the route table is read from dist/routes.js.
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { committedTypes, readDocument, render, root, svcBin } from "./openapi-gen.mjs";

let failed = false;
const fail = (message) => {
  failed = true;
  console.error(`check-openapi: ${message}`);
};

const document = readDocument();
console.log(`check-openapi: document from ${svcBin()} (${Object.keys(document.paths).length} paths)`);

// 1. The committed types match a fresh generation.
const dir = mkdtempSync(path.join(os.tmpdir(), "svc-sdk-openapi-"));
try {
  const fresh = path.join(dir, "openapi.d.ts");
  writeFileSync(fresh, await render(document));
  const want = readFileSync(fresh, "utf8");
  const have = readFileSync(committedTypes, "utf8");
  if (want !== have) {
    const a = have.split("\n");
    const b = want.split("\n");
    let line = 0;
    while (line < Math.min(a.length, b.length) && a[line] === b[line]) line++;
    fail(
      `src/openapi.d.ts is out of date (first difference at line ${line + 1}:\n` +
        `  committed: ${JSON.stringify(a[line] ?? "<end of file>")}\n` +
        `  generated: ${JSON.stringify(b[line] ?? "<end of file>")})\n` +
        `  run \`npm run generate-openapi\` and review the SDK for the changed fields`,
    );
  } else {
    console.log("check-openapi: src/openapi.d.ts matches the server's document");
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}

// 2. Every route the SDK calls exists in the document.
const routesJs = path.join(root, "dist", "routes.js");
if (!existsSync(routesJs)) {
  fail("dist/routes.js is missing; run `npm run build` first");
} else {
  const { routes } = await import(pathToFileURL(routesJs).href);
  let count = 0;
  for (const [name, route] of Object.entries(routes)) {
    count++;
    const item = document.paths[route.path];
    if (!item) {
      fail(`route ${name}: path ${route.path} is not in the document`);
    } else if (!item[route.method.toLowerCase()]) {
      fail(`route ${name}: ${route.method} ${route.path} is not in the document`);
    }
  }
  console.log(`check-openapi: checked ${count} routes of src/routes.ts`);
}

if (failed) process.exit(1);
console.log("check-openapi: ok");

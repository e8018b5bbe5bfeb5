// Regenerates src/openapi.d.ts from `$SVC_BIN openapi`.
import { writeFileSync } from "node:fs";
import { committedTypes, readDocument, render } from "./openapi-gen.mjs";

const text = await render(readDocument());
writeFileSync(committedTypes, text);
console.log(`wrote ${committedTypes}`);

// tsc does not copy declaration files: put the generated OpenAPI types beside the compiled SDK.
import { copyFileSync } from "node:fs";
import path from "node:path";
import { root } from "./openapi-gen.mjs";

copyFileSync(path.join(root, "src", "openapi.d.ts"), path.join(root, "dist", "openapi.d.ts"));

// Builds the console into OUTDIR (default dist): index.html, and hashed assets under assets/
// with a gzip copy of each, which svc serves to browsers that accept it. Run by
// crates/svc-ui/build.rs during cargo's build, so the binary always carries the console built
// from these sources.
import * as esbuild from "esbuild";
import { mkdirSync, readFileSync, rmSync, writeFileSync, readdirSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { gzipSync, constants } from "node:zlib";

const outdir = process.argv[2] ?? "dist";
rmSync(outdir, { recursive: true, force: true });
mkdirSync(join(outdir, "assets"), { recursive: true });

const result = await esbuild.build({
  entryPoints: { app: "src/main.tsx" },
  bundle: true,
  minify: true,
  format: "esm",
  target: "es2022",
  outdir: join(outdir, "assets"),
  entryNames: "[name]-[hash]",
  assetNames: "[name]-[hash]",
  jsx: "automatic",
  jsxImportSource: "preact",
  metafile: true,
  legalComments: "none",
  logLevel: "warning",
});

const outputs = Object.keys(result.metafile.outputs).map((path) => relative(outdir, path));
const script = outputs.find((path) => path.endsWith(".js"));
const style = outputs.find((path) => path.endsWith(".css"));
const template = readFileSync("src/index.html", "utf8");
writeFileSync(
  join(outdir, "index.html"),
  template
    .replace("%SCRIPT%", `/ui/${script}`)
    .replace("%STYLE%", style ? `<link rel="stylesheet" href="/ui/${style}">` : ""),
);

let compressed = 0;
const walk = (dir) =>
  readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
for (const path of walk(outdir)) {
  const gz = gzipSync(readFileSync(path), { level: constants.Z_BEST_COMPRESSION });
  writeFileSync(`${path}.gz`, gz);
  compressed += gz.length;
}
console.log(`console built into ${outdir}: ${outputs.length + 1} files, ${compressed} bytes gzipped`);

#!/usr/bin/env node
// Builds the native module and its generated files, like `napi build --platform`:
//
//   mqstate.<platform>.node   the addon (copied from cargo's output)
//   binding.js                the loader            (napi-rs generator)
//   binding.d.ts              the addon's typings   (napi-rs generator, from the #[napi] items)
//
// The difference with `napi build --platform` is the cargo invocation: `napi build` always
// passes `--target <triple>`, which makes cargo build every dependency a second time under
// target/<triple>/. Here cargo builds for the host with no `--target`, in the workspace's
// target directory and profile, so the artifacts of `cargo build` / `cargo test` are reused.
// The generators are @napi-rs/cli's own (`generateTypeDef`, `writeJsBinding`), so the files
// are the ones `napi build --platform --js binding.js --dts binding.d.ts` writes.
//
// With --check, the generated files are written to a scratch folder instead, together with
// what `tsc` makes of index.ts (index.js, index.d.ts), and compared with the checked-in
// ones: the script fails, printing a diff, if any of them is stale.
//
// The addon is built with the `testing` cargo feature (the in-process LocalServer and
// LocalIotHub, the fault proxy and the benchmark hooks the test suite and the benchmark use),
// so the checked-in binding.d.ts and binding.js describe those too. The released package
// (scripts/dist, `npm run build:release`) is built without it: index.ts then throws a clear
// error when they are used.
//
// Usage: node scripts/build-native.mjs [--release] [--check]
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generateTypeDef, parseTriple, writeJsBinding } from '@napi-rs/cli';

const release = process.argv.includes('--release');
const check = process.argv.includes('--check');
const pkgDir = dirname(dirname(fileURLToPath(import.meta.url)));
const pkg = JSON.parse(readFileSync(join(pkgDir, 'package.json'), 'utf8'));
const binaryName = pkg.napi.binaryName;
const crateName = 'mqstate-node';

const metadata = JSON.parse(
  execFileSync('cargo', ['metadata', '--format-version', '1', '--no-deps'], { cwd: pkgDir, encoding: 'utf8' }),
);
const targetDir = metadata.target_directory;
const host = /^host: (\S+)$/m.exec(execFileSync('rustc', ['-vV'], { encoding: 'utf8' }))[1];
const target = parseTriple(host);

// napi-derive writes the typings of the #[napi] items here while the crate compiles.
const typeDefDir = join(targetDir, 'napi-rs', `${crateName}-typedef`);
const typeDefFile = join(typeDefDir, crateName);
mkdirSync(typeDefDir, { recursive: true });
const env = { ...process.env, NAPI_TYPE_DEF_TMP_FOLDER: typeDefDir };
if (!existsSync(typeDefFile)) {
  // The crate is up to date but its typings are gone: make napi-build rerun, so it compiles.
  env[`NAPI_FORCE_BUILD_${crateName.toUpperCase().replace(/-/g, '_')}`] = String(Date.now());
}

const cargoArgs = ['build', '--package', crateName, '--features', 'testing', ...(release ? ['--release'] : [])];
console.log(`cargo ${cargoArgs.join(' ')}`);
execFileSync('cargo', cargoArgs, { cwd: pkgDir, env, stdio: 'inherit' });

// The addon: lib<crate>.so -> <binaryName>.<platformArchABI>.node (written atomically, so a
// running process that loaded the old one is not disturbed).
const lib = { darwin: `lib${crateName.replace(/-/g, '_')}.dylib`, win32: `${crateName.replace(/-/g, '_')}.dll` }[
  target.platform
] ?? `lib${crateName.replace(/-/g, '_')}.so`;
const src = join(targetDir, release ? 'release' : 'debug', lib);
const dest = join(pkgDir, `${binaryName}.${target.platformArchABI}.node`);
copyFileSync(src, `${dest}.tmp`);
renameSync(`${dest}.tmp`, dest);
console.log(`${src} -> ${dest}`);

// Inside the package, so that `tsc` finds node_modules/@types/node from there.
const outDir = check ? join(pkgDir, '.typings-check') : pkgDir;
if (check) {
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir);
}
const { exports, dts } = await generateTypeDef({
  typeDefDir,
  cwd: pkgDir,
  declareBindingTarget: true,
  configDtsHeader: pkg.napi.dtsHeader,
});
writeFileSync(join(outDir, 'binding.d.ts'), dts);
await writeJsBinding({
  platform: true,
  idents: exports,
  jsBinding: 'binding.js',
  binaryName,
  packageName: pkg.name,
  version: pkg.version,
  outputDir: outDir,
  wasiFlavors: [],
});
if (!check) {
  console.log('binding.js, binding.d.ts written');
} else {
  // index.ts compiled against the regenerated binding.d.ts.
  copyFileSync(join(pkgDir, 'index.ts'), join(outDir, 'index.ts'));
  const tsconfig = JSON.parse(readFileSync(join(pkgDir, 'tsconfig.json'), 'utf8'));
  writeFileSync(join(outDir, 'tsconfig.json'), JSON.stringify(tsconfig));
  const tsc = join(pkgDir, 'node_modules', 'typescript', 'bin', 'tsc');
  execFileSync(process.execPath, [tsc, '-p', join(outDir, 'tsconfig.json')], { stdio: 'inherit' });
  let stale = 0;
  for (const file of ['binding.d.ts', 'binding.js', 'index.d.ts', 'index.js']) {
    const checkedIn = join(pkgDir, file);
    const fresh = join(outDir, file);
    if (existsSync(checkedIn) && readFileSync(checkedIn).equals(readFileSync(fresh))) continue;
    stale++;
    console.error(`STALE: ${file} differs from what the build generates:`);
    spawnSync('diff', ['-u', checkedIn, fresh], { stdio: 'inherit' });
  }
  rmSync(outDir, { recursive: true, force: true });
  if (stale > 0) {
    console.error(`${stale} generated file(s) are stale: run \`npm run build\` (or node scripts/build-native.mjs && npx tsc) and commit them.`);
    process.exit(1);
  }
  console.log('generated typings are up to date (binding.d.ts, binding.js, index.d.ts, index.js)');
}

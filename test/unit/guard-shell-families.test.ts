import { spawnSync } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import test from 'ava';
import fc from 'fast-check';
import type { Parser } from 'web-tree-sitter';
import { decideCommand, formatUnsure, guardVerdict, loadBashParser, type GuardDecision, type GuardReason } from '../../activities/bash/guard';

/**
 * The shell families of the confinement issue (deliverables 4 and 5): for each, a table of commands with the
 * outcome the guard must reach — refused with a reason, `unsure` (allowed with notes: the sandbox decides), or
 * allowed with nothing left unjudged — and a property that generates variants of the family.
 */

const BRANCH = 'orchard/s1/work';
const WORKTREE = '/work/wt/s1';
const context = { branch: BRANCH, worktree: WORKTREE, isolated: true };
let parser: Parser;
test.before(async () => {
  parser = await loadBashParser();
});

type Outcome = 'allowed' | 'unsure' | GuardReason;
const outcome = (d: GuardDecision): Outcome => (d.allowed ? (d.unsure?.length ? 'unsure' : 'allowed') : d.reason);
const show = (d: GuardDecision) => (d.allowed ? (d.unsure?.length ? `unsure: ${d.unsure.map((n) => n.why).join(' | ')}` : 'allowed') : `${d.reason}: ${d.why}`);
const decide = (command: string) => decideCommand(parser, command, context);

const FAMILIES: Record<string, readonly (readonly [string, Outcome])[]> = {
  'a cd that may fail': [
    ['cd src; cd ..; git status', 'outside_worktree'],
    ['cd missing; cd ../..; git -C s1 status', 'outside_worktree'],
    ['pushd src; cd ..; git status', 'outside_worktree'],
    ['cd src || exit 1; cd ..; git status', 'allowed'],
    ['cd src && cd .. && git status', 'allowed'],
    ['set -e; cd src; cd ..; git status', 'allowed'],
    ['cd src; git status', 'allowed'],
    ['(cd ..); git status', 'allowed'],
    ['(cd src); cd ..; git status', 'outside_worktree'],
    ['echo $(cd ..); git status', 'allowed'],
    ['cd .. | true; git -C s1 status', 'outside_worktree'],
    ['shopt -s cdable_vars; d=/work/main; cd d; git status', 'outside_worktree'],
    ['CDPATH=/work cd main; git status', 'shell_env_override'],
    ['cd src && git status || git log', 'allowed'],
  ],
  'command names that are not literal': [
    ['$g status', 'dynamic_command'],
    ['${x}t status', 'dynamic_command'],
    ['"$G" merge main', 'dynamic_command'],
    ['gi? merge main', 'dynamic_command'],
    ['command $g status', 'dynamic_argument'],
    ['env $g status', 'dynamic_argument'],
    ['exec git merge main', 'integration_policy'],
    ['builtin command git merge main', 'integration_policy'],
    ['nice -n 5 timeout 9 git merge main', 'integration_policy'],
    ['find . -maxdepth 0 -exec git merge main \\;', 'integration_policy'],
    ["'git' merge main", 'integration_policy'],
    ['cp /usr/bin/git ./g', 'dynamic_command'],
    ['install -m 755 /bin/bash bin/sh2', 'dynamic_command'],
    ['ln -s /usr/bin/git g', 'dynamic_command'],
    ['ln -s /work/main/bin/tool t', 'outside_worktree'],
    ['./g merge main', 'unsure'],
    ['bin/tool --flag', 'unsure'],
    ['PATH=./bin:$PATH git status', 'unsure'],
    ['export PATH=/work/wt/s1/bin:$PATH; git status', 'unsure'],
    ['for PATH in /tmp/x; do ls; done', 'unsure'],
    ['export PATH="$PATH:./node_modules/.bin"; git status', 'allowed'],
    ['f() { git merge main; }; f', 'integration_policy'],
    ['export -f f', 'function_or_alias'],
    ["export BASH_FUNC_ls%%='() { git merge main; }'", 'parse_error'],
    ['export BASH_FUNC_ls=x', 'function_or_alias'],
    ['BASH_FUNC_git=x bash -c true', 'function_or_alias'],
    ['BASH_ENV=./x bash -c true', 'shell_env_override'],
    ['HOME=/tmp/h git status', 'shell_env_override'],
    ['xargs git show', 'unsure'],
    ['git ls-files -z | xargs -0 git show', 'unsure'],
    ['find . -name "*.ts" -exec git log -1 -- {} +', 'allowed'],
    ['find . -name "*.ts" -exec git log -1 {} +', 'unsure'],
    ['xargs git checkout', 'dynamic_argument'],
    ['somebinary --run', 'unsure'],
  ],
  'variables exported by for, read, printf -v, declare -x, allexport': [
    ['for GIT_DIR in ../main/.git; do git status; done', 'git_env_override'],
    ['read GIT_DIR < f; git status', 'git_env_override'],
    ['printf -v GIT_WORK_TREE %s /work/main', 'git_env_override'],
    ['mapfile GIT_INDEX_FILE < f', 'git_env_override'],
    ['getopts ab GIT_DIR', 'git_env_override'],
    ['declare -x GIT_DIR=../main/.git', 'git_env_override'],
    ['set -a; x=1', 'shell_env_override'],
    ['set -o allexport', 'shell_env_override'],
    ['read PATH < f; ls', 'unsure'],
    ['read -r line < f; echo "$line"', 'allowed'],
    ['for f in a b; do echo "$f"; done', 'allowed'],
  ],
  'arithmetic evaluation of values': [
    ['i=0; echo $((i+1))', 'allowed'],
    ['((i++))', 'allowed'],
    ['for ((i=0;i<3;i++)); do echo $i; done', 'allowed'],
    ['let i+=1', 'allowed'],
    ['n=3; [[ $n -gt 2 ]] && echo big', 'allowed'],
    ['echo $(( $# + $? ))', 'allowed'],
    ['x=$(( 4 * 2 )); a[x]=1; echo ${a[x]}', 'allowed'],
    ['read n < f; echo $((n + 1))', 'unsure'],
    ['echo $(( $(wc -l < f) + 1 ))', 'unsure'],
    ['let x=$(cat f)', 'unsure'],
    ['a[$(cat f)]=1', 'unsure'],
    ['for f in *; do echo $((f)); done', 'unsure'],
    ["bash -c 'echo $(($1))' _ 7", 'unsure'],
    ["x='a[$(git merge main)]'; echo $((x))", 'hidden_execution'],
    ["x='a[$(git merge main)]'; y=x; (( y ))", 'hidden_execution'],
    ["let 'a[$(git merge main)]=1'", 'hidden_execution'],
    ["[[ 1 -eq 'a[$(git merge main)]' ]]", 'hidden_execution'],
    ['echo $((`echo 1`))', 'unsure'],
  ],
  'writers that take their target from an option or an operand': [
    ['cp -t /work/main a.ts', 'outside_worktree'],
    ['cp --target-directory=/work/main a.ts', 'outside_worktree'],
    ['mv --target-directory /work/main a.ts', 'outside_worktree'],
    ['install a /work/main/b', 'outside_worktree'],
    ['echo x | tee -a /work/main/log', 'outside_worktree'],
    ['dd if=a of=/work/main/.git/index', 'outside_worktree'],
    ['dd if=a of=.git/index', 'git_metadata_write'],
    ['sort -o /work/main/x a', 'outside_worktree'],
    ['split -l 10 a /work/main/part', 'outside_worktree'],
    ['tar -C /work/main -xf a.tar', 'outside_worktree'],
    ['tar czf /work/main/x.tgz .', 'outside_worktree'],
    ['tar -xPf a.tar', 'unsure'],
    ['rsync -a src/ /work/main/src/', 'outside_worktree'],
    ['patch -d /work/main -p1 < fix.patch', 'outside_worktree'],
    ['patch -p0 < fix.patch', 'unsure'],
    ["patch -p0 <<'EOF'\n--- a\n+++ ../main/a\n@@ -1 +1 @@\n-x\n+y\nEOF", 'outside_worktree'],
    ['iconv -f latin1 -t utf8 -o /work/main/a a', 'outside_worktree'],
    ['xxd -r dump /work/main/bin', 'outside_worktree'],
    ['gcc -o /work/main/a.out a.c', 'outside_worktree'],
    ['cc -o/work/main/a.out a.c', 'outside_worktree'],
    ['go build -o /work/main/bin ./...', 'outside_worktree'],
    ['history -w /work/main/.bash_history', 'outside_worktree'],
    ['echo x > "$OUT"', 'unsure'],
    ['echo x > "/work/main/$f"', 'outside_worktree'],
    ['cp a "$DEST"', 'unsure'],
    ['cp a.ts b.ts && mv b.ts src/', 'allowed'],
    ['sort -o sorted.txt data.txt', 'allowed'],
    ['tar czf /tmp/out.tgz src', 'allowed'],
    ['gcc -o build/a.out a.c', 'allowed'],
  ],
  'links to or through paths outside the worktree': [
    ['ln /work/main/README.md r.md', 'outside_worktree'],
    ['ln -s ../main m', 'outside_worktree'],
    ['ln -sf /work/main/.git/hooks hooks', 'outside_worktree'],
    ['cp -l /work/main/a.ts a.ts', 'outside_worktree'],
    ['cp -s /work/main/a.ts a.ts', 'outside_worktree'],
    ['link /work/main/a.ts a.ts', 'outside_worktree'],
    ['exec 3</work/main/a.ts; echo x > /dev/fd/3', 'unsure'],
    ['echo x > /proc/self/fd/3', 'unsure'],
    ['echo x > /proc/self/cwd/../main/a', 'unsure'],
    ['ln -s src/a.ts b.ts', 'allowed'],
    ['cp -l a.ts b.ts', 'allowed'],
    ['echo hi > /dev/stderr', 'allowed'],
  ],
  'interpreters that run programs': [
    ['python3 -c "import os; os.system(\'git push origin HEAD:main\')"', 'unsure'],
    ["python3.11 -c \"import subprocess; subprocess.run(['git', 'merge', 'main'])\"", 'unsure'],
    ["node20 -e \"require('child_process').execSync('git merge main')\"", 'unsure'],
    ["node -e \"require('child_'+'process')\"", 'unsure'],
    ['perl5.36 -e \'system("sh -c id")\'', 'unsure'],
    ["ruby -e '`git merge main`'", 'unsure'],
    ["python3 - <<'EOF'\nimport os\nos.system('git merge main')\nEOF", 'unsure'],
    ['awk \'BEGIN { system("git merge main") }\'', 'unsure'],
    ["gawk -l ordchr '{print}' f", 'unsure'],
    ["sed 's/x/git merge main/e' f", 'inline_interpreter'],
    ["ed -s f <<< '!git merge main'", 'inline_interpreter'],
    ["vim -c '!git merge main' -c q f", 'inline_interpreter'],
    ["make --eval='x:=$(shell git merge main)'", 'unresolved_launcher'],
    ['make -C /work/main', 'outside_worktree'],
    ["script -qc 'git merge main' /dev/null", 'integration_policy'],
    ["watch -n 1 'git merge main'", 'integration_policy'],
    ['watch -x git merge main', 'integration_policy'],
    ['python3 -c \'print("git")\'', 'unsure'],
    ['node -e \'console.log("child_process")\'', 'unsure'],
    ['python3 -c "$CODE"', 'unsure'],
    ['echo "$CODE" | python3', 'unsure'],
    ["node <<'EOF'\nconsole.log(1)\nEOF", 'unsure'],
    ['python3 scripts/gen.py', 'unsure'],
    ['python3 -m pytest', 'unsure'],
    ['NODE_OPTIONS="--require ./hook.js" node -v', 'unsure'],
    ['PERL5OPT=-Mhook perl -v', 'unsure'],
    ['PYTHONSTARTUP=x.py python3 -V', 'unsure'],
    ['awk \'{ print | "sort" }\' f', 'unsure'],
    ["vim -c 'set ts=2' f", 'unsure'],
    ['NODE_OPTIONS=--max-old-space-size=4096 node --version', 'allowed'],
    ["awk '/git/ { print $1 }' f", 'allowed'],
    ['python3 --version', 'allowed'],
    ["watch -n 5 'git status'", 'allowed'],
    ["script -qc 'git log -1' /dev/null", 'allowed'],
  ],
};

for (const [family, rows] of Object.entries(FAMILIES)) {
  for (const [command, expected] of rows) {
    test(`${family}: ${JSON.stringify(command).slice(0, 90)} → ${expected}`, (t) => {
      const d = decide(command);
      t.is(outcome(d), expected, show(d));
    });
  }
}

/**
 * Ordinary agent shell (deliverable 5 and more), in the child's own worktree on its own branch: what a demanding user
 * wants is `allowed` (nothing left unjudged: the command's full effect is in its text) or `unsure` (allowed with notes
 * where the text cannot say: scripts, package managers, build tools, inline interpreter code, files named on stdin).
 * Refusing ordinary work costs users and the kernel sandbox is the wall, so the test measures the refusal rate.
 */
const BENIGN: readonly (readonly [string, 'allowed' | 'unsure'])[] = [
  ['case "$x" in *) echo any;; esac', 'allowed'],
  ['case "$x" in a|b) echo ab;; [ab]) echo one;; *.ts) echo ts;; esac', 'allowed'],
  ['for f in src/*.ts; do [[ $f == src/* ]] && echo "$f"; done', 'allowed'],
  ['i=0; echo $((i+1))', 'allowed'],
  ['i=0; ((i++)); echo $i', 'allowed'],
  ['for ((i=0;i<3;i++)); do echo $i; done', 'allowed'],
  ['i=1; let i+=1; echo $i', 'allowed'],
  ['n=5; [[ $n -gt 2 ]] && echo big', 'allowed'],
  ['[[ $# -gt 0 ]] || echo none', 'allowed'],
  ['echo $((RANDOM % 9))', 'allowed'],
  ['time (ls src)', 'allowed'],
  ['time { ls; git status; }', 'allowed'],
  ['time -p ls', 'allowed'],
  ['python3 -c \'print("git")\'', 'unsure'],
  ['node -e \'console.log("child_process")\'', 'unsure'],
  ['git ls-files | xargs git show', 'unsure'],
  ['npm test', 'unsure'],
  ['npm run build', 'unsure'],
  ['npx tsc --noEmit', 'unsure'],
  ['make -j2', 'unsure'],
  ['bash scripts/check.sh', 'unsure'],
  ['grep -rn "TODO" src/', 'allowed'],
  ['grep -rn "git merge" docs/ | head -20', 'allowed'],
  ["sed -i 's/foo/bar/g' src/a.ts", 'allowed'],
  ["sed -n '10,20p' src/a.ts", 'allowed'],
  ["cat > src/new.ts <<'EOF'\nexport const x = 1;\nEOF", 'allowed'],
  ['cat >> notes.md <<EOF\n- done $(date)\nEOF', 'allowed'],
  ['mkdir -p build/out && cp src/a.ts build/out/', 'allowed'],
  ['rm -rf build dist', 'allowed'],
  ['mv src/old.ts src/new.ts', 'allowed'],
  ['touch src/index.ts && ls -la src', 'allowed'],
  ['find . -name "*.ts" -not -path "./node_modules/*" | wc -l', 'allowed'],
  ['wc -l src/*.ts | sort -n | tail -5', 'allowed'],
  ['git status --short && git diff --stat', 'allowed'],
  ['git add -A && git commit -m "fix: x"', 'allowed'],
  ['git log --oneline -5', 'allowed'],
  ['git diff HEAD~1 -- src/ > /tmp/d.patch', 'allowed'],
  ['cd src && ls && cd .. && git status', 'allowed'],
  ['if [ -f package.json ]; then echo node; else echo other; fi', 'allowed'],
  ['while read -r f; do echo "$f"; done < files.txt', 'allowed'],
  ['for d in a b c; do mkdir -p "out/$d"; done', 'unsure'],
  ['test -d node_modules || echo missing', 'allowed'],
  ['diff -u a.txt b.txt || true', 'allowed'],
  ['jq .version package.json', 'allowed'],
  ['sort -u words.txt -o words.txt', 'allowed'],
  ['head -c 200 README.md; echo', 'allowed'],
  ["printf '%s\\n' a b | tee out.txt", 'allowed'],
  ['x=$(git rev-parse HEAD); echo "$x"', 'allowed'],
  ['echo "node -e require(child_process)" > notes.txt', 'allowed'],
  ['tar czf /tmp/src.tgz src', 'allowed'],
  // test runners
  ['npm test -- --watch=false', 'unsure'],
  ['npm run test:unit', 'unsure'],
  ['npm test -- -t "parses heredocs"', 'unsure'],
  ['npx vitest run', 'unsure'],
  ['npx vitest run src/parser.test.ts', 'unsure'],
  ['npx jest -t "guard refuses" src/guard', 'unsure'],
  ['npx jest --testPathPattern=parser --runInBand', 'unsure'],
  ['npx ava test/unit/a.test.ts --match "*benign*"', 'unsure'],
  ['node --test', 'unsure'], // runs the test files it finds on disk
  ['node --test test/*.test.mjs', 'unsure'],
  ['pytest -q', 'unsure'],
  ['pytest -q tests/test_api.py -k "not slow"', 'unsure'],
  ['python3 -m pytest -x tests/', 'unsure'],
  ['PYTHONPATH=src pytest -q', 'unsure'],
  ['go test ./...', 'unsure'],
  ['go test -run TestParse -v ./internal/parser', 'unsure'],
  ['go vet ./...', 'unsure'],
  ['cargo test', 'unsure'],
  ['cargo test --lib -- --nocapture', 'unsure'],
  ['RUST_BACKTRACE=1 cargo test', 'unsure'],
  ['yarn test', 'unsure'],
  ['pnpm test', 'unsure'],
  ['bun test', 'unsure'],
  ['deno test', 'unsure'],
  ['make test', 'unsure'],
  ['CI=1 npm test', 'unsure'],
  ['timeout 60 npm test', 'unsure'],
  ['npm test 2>&1 | tail -40', 'unsure'],
  ['npx vitest run --reporter=verbose 2>&1 | grep -E "FAIL|✓" | head -50', 'unsure'],
  ['pytest -q 2>&1 | tee /tmp/pytest.log', 'unsure'],
  ['python3 manage.py test', 'unsure'],
  // builds and programs of the project
  ['tsc --noEmit', 'allowed'], // writes only what tsconfig.json names (a build-info file): the sandbox confines where
  ['tsc -p tsconfig.build.json', 'allowed'], // writes where tsconfig.build.json says (outDir); it runs no code
  ['npx tsc --noEmit -p tsconfig.json', 'unsure'],
  ['npx tsc --noEmit 2>&1 | head -30', 'unsure'],
  ['make', 'unsure'],
  ['make -j4 all', 'unsure'],
  ['make clean && make', 'unsure'],
  ['nice -n 10 make -j8', 'unsure'],
  ['cargo build', 'unsure'],
  ['cargo build --release', 'unsure'],
  ['cargo check', 'unsure'],
  ['cargo run -- --help', 'unsure'],
  ['go build ./...', 'unsure'],
  ['go build -o bin/x ./cmd/x', 'unsure'],
  ['GOFLAGS=-mod=vendor go build ./...', 'unsure'],
  ['go run ./cmd/tool --help', 'unsure'],
  ['gcc -o build/a a.c', 'allowed'],
  ['gcc -Wall -O2 -c src/util.c -o build/util.o', 'allowed'],
  ['cc -o build/hello hello.c && ./build/hello', 'unsure'],
  ['npm run build && ls dist', 'unsure'],
  ['time npm run build', 'unsure'],
  ['mkdir -p build && cmake -S . -B build && cmake --build build', 'unsure'],
  ['python3 -m build --no-isolation', 'unsure'],
  ['node scripts/gen.js', 'unsure'],
  ['node dist/cli.js --help', 'unsure'],
  ['npx tsx scripts/build.ts', 'unsure'],
  // formatters and linters
  ['npx prettier --write src', 'unsure'],
  ['npx prettier --check "src/**/*.ts"', 'unsure'],
  ['npx eslint --fix src', 'unsure'],
  ['npx eslint . --ext .ts', 'unsure'],
  ['git diff --name-only | xargs npx prettier --write', 'unsure'],
  ['black .', 'unsure'],
  ['black --check src tests', 'unsure'],
  ['isort .', 'unsure'],
  ['flake8 src', 'unsure'],
  ['mypy src', 'unsure'],
  ['ruff check .', 'unsure'],
  ['ruff check --fix .', 'unsure'],
  ['ruff format src', 'unsure'],
  ['gofmt -w .', 'unsure'],
  ['gofmt -l . | head', 'unsure'],
  ['goimports -w .', 'unsure'],
  ['cargo fmt', 'unsure'],
  ['cargo clippy -- -D warnings', 'unsure'],
  ['rustfmt src/main.rs', 'unsure'],
  ['clang-format -i src/*.c', 'unsure'],
  ['shellcheck scripts/*.sh', 'unsure'],
  ['npm run lint', 'unsure'],
  // package managers, offline
  ['npm ci --offline', 'unsure'],
  ['npm install --prefer-offline', 'unsure'],
  ['npm install --prefer-offline --no-audit --no-fund', 'unsure'],
  ['npm ls --depth=0', 'unsure'],
  ['npm outdated || true', 'unsure'],
  ['npm pack --dry-run', 'unsure'],
  ['yarn install --offline', 'unsure'],
  ['pnpm install --offline', 'unsure'],
  ['pip install -e . --no-index', 'unsure'],
  ['pip install --no-index --find-links=wheels -r requirements.txt', 'unsure'],
  ['python3 -m venv .venv && .venv/bin/pip install --no-index -e .', 'unsure'],
  ['pip list', 'unsure'],
  ['uv sync --offline', 'unsure'],
  ['poetry install --no-root', 'unsure'],
  ['cargo build --offline', 'unsure'],
  ['go mod tidy', 'unsure'],
  // shell idioms
  ['ls -la', 'allowed'],
  ['pwd', 'allowed'],
  ['cat package.json', 'allowed'],
  ['git ls-files | grep "\\.ts$" | wc -l', 'allowed'],
  ['find src -name "*.ts" | xargs grep -l "TODO"', 'allowed'],
  ['find . -name "*.pyc" -delete', 'allowed'],
  ['find src -type f -name "*.ts" -print0 | xargs -0 sed -i "s/oldName/newName/g"', 'unsure'], // the files written come from stdin
  ["git diff --name-only | xargs sed -i 's/[[:space:]]*$//'", 'unsure'], // the files written come from stdin
  ['find . -name node_modules -prune -o -name "*.ts" -print | head', 'allowed'],
  ["sed -i 's/\\bvar\\b/let/g' src/*.js", 'allowed'],
  ["sed -i.bak -e 's/foo/bar/' config.ini && rm config.ini.bak", 'allowed'],
  ["awk -F, '{ sum += $3 } END { print sum }' data.csv", 'allowed'],
  ["awk 'NR==1, NR==10' src/a.ts", 'allowed'],
  ['grep -rn "import .* from" src | cut -d: -f1 | sort | uniq -c | sort -rn | head', 'allowed'],
  ['grep -l TODO $(git ls-files "*.ts")', 'allowed'],
  ["jq '.scripts' package.json", 'allowed'],
  ["jq -r '.dependencies | keys[]' package.json", 'allowed'],
  ['jq \'.version = "1.2.0"\' package.json > /tmp/p.json && mv /tmp/p.json package.json', 'allowed'],
  ['for f in src/*.ts; do echo "== $f"; head -3 "$f"; done', 'allowed'],
  ['for f in $(git diff --name-only); do wc -l "$f"; done', 'allowed'],
  ['while IFS= read -r line; do echo "${line%%:*}"; done < <(grep -rn TODO src)', 'allowed'],
  ['ls -1 src | head -5 | while read -r f; do echo "src/$f"; done', 'allowed'],
  ['seq 1 5 | while read -r i; do echo "run $i"; done', 'allowed'],
  ["cat > src/config.ts <<'EOF'\nexport const config = { retries: 3 };\nEOF", 'allowed'],
  ["cat > tests/test_x.py <<'EOF'\ndef test_x():\n    assert 1 + 1 == 2\nEOF", 'allowed'],
  ["cat <<'EOF' > README.md\n# Project\n\nRun `npm test`.\nEOF", 'allowed'],
  ['cat > .env.test <<EOF\nPORT=3000\nEOF', 'allowed'],
  ['printf "%s\\n" "$(date)" >> CHANGELOG.md', 'allowed'],
  ['n=$(git ls-files | wc -l); echo "files: $n"', 'allowed'],
  ['echo "branch: $(git branch --show-current)"', 'allowed'],
  ['count=$(grep -c TODO src/a.ts || true); echo "$count"', 'allowed'],
  ['arr=(a b c); for x in "${arr[@]}"; do echo "$x"; done', 'allowed'],
  ['declare -A m=([a]=1 [b]=2); echo "${m[a]}"', 'allowed'],
  ['name=src/a.ts; echo "${name##*/}" "${name%.ts}"', 'allowed'],
  ['(cd src && ls)', 'allowed'],
  ['(cd packages/core && npm test)', 'unsure'],
  ['cd src && grep -n export index.ts', 'allowed'],
  ['cd packages/api && npx tsc --noEmit && cd ../..', 'unsure'],
  ['set -euo pipefail; npm ci --offline; npm test', 'unsure'],
  ['set -e; make; make test', 'unsure'],
  ['set -o pipefail; npm test | tee /tmp/test.log', 'unsure'],
  ['export NODE_ENV=test; npm test', 'unsure'],
  ["trap 'rm -f /tmp/x' EXIT; echo hi > /tmp/x; cat /tmp/x", 'unsure'],
  ["trap 'echo done' EXIT; ls", 'unsure'],
  ['f() { echo "$1"; }; f a', 'unsure'],
  ['check() { test -f "$1" && echo "ok $1"; }; check package.json; check tsconfig.json', 'unsure'],
  ['cleanup() { rm -rf /tmp/work; }; cleanup', 'unsure'],
  ['diff <(sort a.txt) <(sort b.txt)', 'allowed'],
  ['sort -u <(grep -ho "import [a-z]*" src/*.ts)', 'allowed'],
  ['tmp=$(mktemp); sort data.txt > "$tmp" && mv "$tmp" data.txt', 'unsure'],
  ['echo $PATH | tr : "\\n"', 'allowed'],
  ['env | sort | head', 'allowed'],
  ['which node python3 git', 'allowed'],
  ['command -v jq || echo "no jq"', 'allowed'],
  ['node --version && npm --version', 'allowed'],
  ['du -sh node_modules 2>/dev/null', 'allowed'],
  ['stat -c %s dist/index.js', 'allowed'],
  ['readlink -f src', 'allowed'],
  ['basename "$(pwd)"', 'allowed'],
  ['xargs -n1 echo < list.txt', 'allowed'],
  ['tail -n 50 /tmp/pytest.log', 'allowed'],
  ['ls src | sed "s/\\.ts$//" | sort > /tmp/modules.txt', 'allowed'],
  ['mkdir -p src/utils && touch src/utils/index.ts', 'allowed'],
  ['cp -r templates/base src/new-module', 'allowed'],
  ['chmod +x scripts/run.sh', 'allowed'],
  ['ln -sf ../shared/types.ts src/types.ts', 'allowed'], // the link's target is relative to src/: src/../shared is in the worktree
  ['tr -d "\\r" < data.csv > data.unix.csv', 'allowed'],
  ['cut -d, -f1,3 data.csv | sort -t, -k2 -n | head', 'allowed'],
  ['sha256sum dist/*.js > /tmp/sums.txt', 'allowed'],
  ['cmp a.bin b.bin || echo differ', 'allowed'],
  ['tar -tzf /tmp/src.tgz | head', 'allowed'],
  ['zip -r /tmp/src.zip src', 'unsure'],
  ['rg -n "useEffect" src', 'allowed'],
  ['rg --files | head -50', 'allowed'],
  ['tree -L 2 src', 'allowed'],
  ['ps aux | grep node | head', 'allowed'],
  ['npm run dev &', 'unsure'],
  ['curl -s http://localhost:3000/health', 'allowed'],
  ['sleep 2; ls dist', 'allowed'],
  ['[ -d .git ] || [ -f .git ] && echo repo', 'allowed'],
  // interpreter one-liners
  ["python3 -c \"import json,sys; print(json.load(open('package.json'))['version'])\"", 'unsure'],
  ['python3 -c \'import subprocess; print(subprocess.check_output(["git","status"]).decode())\'', 'unsure'],
  ['python3 -c \'import subprocess; out = subprocess.run(["git", "log", "--oneline", "-5"], capture_output=True, text=True); print(out.stdout)\'', 'unsure'],
  ['python3 -c \'import os; os.system("git status")\'', 'unsure'],
  ['python3 -c \'import subprocess; subprocess.run(["npm", "test"], check=True)\'', 'unsure'],
  ['python3 -c \'print("use git rebase for this")\'', 'unsure'],
  ["python3 -c 'import sys; print(sys.version)'", 'unsure'],
  ['python3 -c \'import json; d=json.load(open("package.json")); d["version"]="2.0.0"; json.dump(d, open("package.json","w"), indent=2)\'', 'unsure'],
  ['python3 -m json.tool package.json', 'unsure'],
  ["python3 - <<'EOF'\nimport json\nprint(json.load(open('package.json'))['name'])\nEOF", 'unsure'],
  ['node -e \'const {execSync}=require("child_process"); console.log(execSync("git log -1").toString())\'', 'unsure'],
  ['node -e \'require("child_process").execSync("git status", {stdio: "inherit"})\'', 'unsure'],
  ['node -e \'console.log(require("./package.json").version)\'', 'unsure'],
  ['node -e \'const fs=require("fs"); fs.writeFileSync("out.txt", "hi")\'', 'unsure'],
  ["node -p 'process.versions.node'", 'unsure'],
  ["perl -pi -e 's/foo/bar/g' src/a.ts", 'unsure'],
  ["perl -ne 'print if /TODO/' src/a.ts", 'unsure'],
  ["ruby -e 'puts RUBY_VERSION'", 'unsure'],
  // git on the child's own branch
  ['git status', 'allowed'],
  ['git status -sb', 'allowed'],
  ['git diff', 'allowed'],
  ['git diff --cached', 'allowed'],
  ['git diff HEAD~2..HEAD', 'allowed'],
  ['git diff --stat HEAD~3', 'allowed'],
  ['git diff --check', 'allowed'],
  ['git diff --word-diff src/a.ts', 'allowed'],
  ['git log -p -- src/', 'allowed'],
  ['git log --oneline --graph -20', 'allowed'],
  ['git log -1 --format=%H', 'allowed'],
  ['git log origin/main..HEAD --oneline', 'allowed'],
  ['git show HEAD', 'allowed'],
  ['git show HEAD~1:src/a.ts', 'allowed'],
  ['git show --stat', 'allowed'],
  ['git add src/a.ts', 'allowed'],
  ['git add -u', 'allowed'],
  ['git commit -m "feat: add parser"', 'allowed'],
  ['git commit -am "wip"', 'allowed'],
  ['git add . && git commit -m "test: cover edge cases" && git log -1 --stat', 'allowed'],
  ['git commit --amend --no-edit', 'allowed'],
  ['git commit --fixup HEAD~1', 'allowed'],
  ['git revert --no-edit HEAD', 'allowed'],
  ['git restore src/a.ts', 'allowed'],
  ['git restore --staged src/a.ts', 'allowed'],
  ['git restore --source=HEAD~1 src/a.ts', 'allowed'],
  ['git checkout -- src/a.ts', 'allowed'],
  ['git checkout HEAD -- src/a.ts', 'allowed'],
  ['git mv src/old.ts src/new.ts', 'allowed'],
  ['git rm --cached debug.log', 'allowed'],
  ['git stash list', 'allowed'],
  ['git stash', 'allowed'],
  ['git stash pop', 'allowed'],
  ['git blame -L 10,20 src/a.ts', 'allowed'],
  ['git grep -n "TODO"', 'allowed'],
  ['git rev-parse HEAD', 'allowed'],
  ['git rev-parse --show-toplevel', 'allowed'],
  ['git branch --show-current', 'allowed'],
  ['git branch -vv', 'allowed'],
  ['git reset', 'allowed'],
  ['git reset HEAD -- src/a.ts', 'allowed'],
  ['git reset --soft HEAD~1', 'allowed'],
  ['git reset --hard HEAD', 'allowed'],
  ['GIT_SEQUENCE_EDITOR=true git rebase -i HEAD~3', 'allowed'],
  ['GIT_SEQUENCE_EDITOR=true git rebase -i --autosquash HEAD~3', 'allowed'],
  ['git rebase --continue', 'allowed'], // a claim the host checks after the command: the todo on disk may hold anything
  ['git rebase --abort', 'allowed'],
  ['git format-patch -1 -o /tmp/p', 'allowed'],
  ['git apply /tmp/p.patch', 'allowed'],
  ['git apply --check /tmp/p.patch', 'allowed'],
  ['git clean -fdx -n', 'allowed'],
  ['git tag -l', 'allowed'],
  ['git describe --tags --always', 'allowed'],
  ['git worktree list', 'allowed'],
  ['git fetch origin', 'allowed'],
  ['git merge-base HEAD origin/main', 'allowed'],
  ['git reflog -5', 'allowed'],
  ['git remote -v', 'allowed'],
  ['git config user.name', 'allowed'],
  ['git cat-file -p HEAD', 'allowed'],
  ['git shortlog -sn', 'allowed'],
];

test('the benign corpus is allowed (with notes only where the text cannot say)', (t) => {
  t.true(BENIGN.length >= 150, `${BENIGN.length} commands`);
  const tally = { clean: 0, notes: 0, refused: 0 };
  const refused: string[] = [];
  const wrong: string[] = [];
  for (const [command, expected] of BENIGN) {
    const d = decide(command);
    const got = outcome(d);
    if (got === 'allowed') tally.clean++;
    else if (got === 'unsure') tally.notes++;
    else tally.refused++;
    if (!d.allowed) refused.push(`${JSON.stringify(command)} → ${show(d)}`);
    else if (got !== expected) wrong.push(`${JSON.stringify(command)}: expected ${expected}, got ${show(d)}`);
  }
  const rate = tally.refused / BENIGN.length;
  t.log(
    `benign corpus: ${BENIGN.length} commands, ${tally.clean} allowed without notes, ${tally.notes} with notes, ` +
      `${tally.refused} refused (${(rate * 100).toFixed(1)}%)`,
  );
  for (const line of refused) t.log(`refused: ${line}`);
  t.true(rate <= 0.02, `${tally.refused} of ${BENIGN.length} ordinary commands refused (at most 2% may be)`);
  t.deepEqual(wrong, []);
});

// ---------------------------------------------------------------------------------------------------------------
// Properties: variants of each family.

const segment = fc.stringMatching(/^[a-z][a-z0-9_-]{0,8}$/);
const outsideDir = fc.constantFrom('/work/main', '/etc', '/work/wt/s2', '/home/u', '../main', '../../elsewhere', '/work/wt/s10');
const quote = (s: string, how: number) => (how === 0 ? s : how === 1 ? `'${s}'` : `"${s}"`);

/** How each writer takes its target: `{T}` is the target path. */
const WRITER_FORMS = [
  'cp a.ts {T}',
  'cp -t {T} a.ts',
  'cp --target-directory={T} a.ts',
  'mv a.ts {T}',
  'mv --target-directory {T} a.ts',
  'install -m 644 a.ts {T}',
  'tee {T}',
  'tee -a {T}',
  'dd if=a of={T}',
  'sort -o {T} a',
  'sort --output={T} a',
  'split a {T}',
  'tar -C {T} -xf a.tar',
  'tar cf {T} .',
  'rsync -a src/ {T}',
  'patch -d {T} -p1',
  'iconv -f a -t b -o {T} f',
  'xxd -r f {T}',
  'gcc -o {T} a.c',
  'clang -o {T} a.c',
  'history -w {T}',
  'touch {T}',
  'rm -rf {T}',
  'mkdir -p {T}',
  'truncate -s 0 {T}',
  'echo x > {T}',
  'echo x >> {T}',
  'ln -s {T} l',
  'ln {T} l',
  'cp -l {T} l',
  'link {T} l',
  'curl -o {T} https://x',
  'sed -i s/a/b/ {T}',
  'awk \'{print > "{T}"}\' f',
  'time -o {T} ls',
  'csplit -f {T} f 1',
];

test('property: any writer with a target under a path outside the worktree is never allowed without notes', (t) => {
  fc.assert(
    fc.property(fc.constantFrom(...WRITER_FORMS), outsideDir, segment, fc.integer({ min: 0, max: 2 }), (form, dir, name, how) => {
      const target = form.includes('"{T}"') ? `${dir}/${name}` : quote(`${dir}/${name}`, how);
      const command = form.replace('{T}', target);
      const d = decide(command);
      if (d.allowed && !d.unsure?.length) t.log(`allowed: ${command}`);
      return !d.allowed || !!d.unsure?.length;
    }),
    { numRuns: 800, seed: 20261001 },
  );
  t.pass();
});

test('property: the same writers aimed inside the worktree or /tmp are allowed', (t) => {
  const insideForms = WRITER_FORMS.filter((f) => !/^(ln|cp -l|link) /.test(f));
  fc.assert(
    fc.property(fc.constantFrom(...insideForms), fc.constantFrom('build', 'src/gen', '/tmp', '/work/wt/s1/out'), segment, (form, dir, name) => {
      const command = form.replace('{T}', `${dir}/${name}`);
      const d = decide(command);
      if (!d.allowed) t.log(`refused: ${command}: ${d.reason} ${d.why}`);
      return d.allowed;
    }),
    { numRuns: 400, seed: 20261002 },
  );
  t.pass();
});

const ident = fc.stringMatching(/^[a-z][a-z0-9_]{0,6}$/).filter((s) => !['do', 'done', 'if', 'fi', 'in', 'for', 'then', 'esac', 'case'].includes(s));
const ARITH_USES = [
  'echo $(({v} + {n}))',
  '(( {v} > {n} )) && echo y',
  'let "{v} = {v} * {n}"',
  '[[ ${v} -gt {n} ]] && echo y',
  'a[{v}]={n}; echo ${a[{v}]}',
  'echo $(( {v} % {n} ))',
  'echo ${s:{v}}',
];
const LITERAL_ASSIGN = [
  '{v}={n}',
  'for {v} in {n} 2 3; do :; done',
  'for (({v}=0; {v}<{n}; {v}++)); do :; done',
  '{v}=$(({n} * 2))',
  '{v}=$#',
  'declare {v}={n}',
  'local {v}={n}',
];

test('property: arithmetic over variables assigned literals in the script is allowed without notes', (t) => {
  fc.assert(
    fc.property(ident, fc.integer({ min: 1, max: 999 }), fc.constantFrom(...LITERAL_ASSIGN), fc.constantFrom(...ARITH_USES), (v, n, assign, use) => {
      const command = `${assign.replaceAll('{v}', v).replaceAll('{n}', String(n))}\n${use.replaceAll('{v}', v).replaceAll('{n}', String(n))}`;
      const d = decide(command);
      if (outcome(d) !== 'allowed') t.log(`${JSON.stringify(command)}: ${show(d)}`);
      return outcome(d) === 'allowed';
    }),
    { numRuns: 600, seed: 20261003 },
  );
  t.pass();
});

const RUNTIME_ASSIGN = ['read {v} < f', '{v}=$(cat f)', 'mapfile -t {v} < f', 'printf -v {v} %s "$(cat f)"', 'for {v} in *; do :; done', 'IFS= read -r {v}'];

test('property: arithmetic over values read at run time is unsure, never silently allowed or refused', (t) => {
  fc.assert(
    fc.property(ident, fc.integer({ min: 1, max: 999 }), fc.constantFrom(...RUNTIME_ASSIGN), fc.constantFrom(...ARITH_USES), (v, n, assign, use) => {
      const command = `${assign.replaceAll('{v}', v)}\n${use.replaceAll('{v}', v).replaceAll('{n}', String(n))}`;
      const d = decide(command);
      if (outcome(d) !== 'unsure') t.log(`${JSON.stringify(command)}: ${show(d)}`);
      return outcome(d) === 'unsure';
    }),
    { numRuns: 400, seed: 20261004 },
  );
  t.pass();
});

test('property: a literal holding code, evaluated arithmetically through any chain of names, is refused', (t) => {
  fc.assert(
    fc.property(fc.array(ident, { minLength: 1, maxLength: 3 }), fc.constantFrom(...ARITH_USES), (names, use) => {
      const unique = [...new Set(names)];
      const chain = unique.map((name, k) => (k === 0 ? `${name}='a[$(git merge main)]'` : `${name}=${unique[k - 1]}`)).join('; ');
      const last = unique[unique.length - 1];
      const command = `${chain}; ${use.replaceAll('{v}', last).replaceAll('{n}', '1')}`;
      const d = decide(command);
      if (d.allowed) t.log(`allowed: ${command}`);
      return !d.allowed && d.reason === 'hidden_execution';
    }),
    { numRuns: 300, seed: 20261005 },
  );
  t.pass();
});

const NAME_FROM_EXPANSION = ['$g', '${g}', '"$g"', '${g}t', 'g${x}', '$(echo git)', '`echo git`', 'g?t', 'gi[t]', '"${a[0]}"', '${g:-git}'];
const NAME_WRAPPERS = [
  '',
  'command ',
  'env ',
  'exec ',
  'nice ',
  'timeout 5 ',
  'nohup ',
  'builtin command ',
  'env -i ',
  'stdbuf -oL ',
  'find . -exec ',
  'xargs ',
];

test('property: a command name built from an expansion is never allowed without notes', (t) => {
  fc.assert(
    fc.property(
      fc.constantFrom(...NAME_FROM_EXPANSION),
      fc.constantFrom(...NAME_WRAPPERS),
      fc.constantFrom('status', 'merge main', 'log'),
      (name, wrapper, args) => {
        const command = `${wrapper}${name} ${args}${wrapper.startsWith('find') ? ' \\;' : ''}`;
        const d = decide(command);
        if (d.allowed && !d.unsure?.length) t.log(`allowed: ${command}`);
        return !d.allowed || !!d.unsure?.length;
      },
    ),
    { numRuns: 500, seed: 20261006 },
  );
  t.pass();
});

const INTERPRETERS = ['python3', 'python3.11', 'python', 'pypy3', 'node', 'node20', 'nodejs', 'perl', 'perl5.36', 'ruby', 'ruby3.2'];
const flagFor = (name: string) => (/^(python|pypy)/.test(name) ? '-c' : '-e');

test('property: inline interpreter code, under any versioned name, is unsure whatever its strings say; alone the guard refuses what spawns git', (t) => {
  const attacks = [
    'os.system("git merge main")',
    'subprocess.run(["git","push","origin","HEAD:main"])',
    'require("child_process").execSync("git merge main")',
    'system("sh -c id")',
    '`git merge main`',
  ];
  const benign = ['print(1)', 'console.log("git")', 'x = "child_process"', 'print("subprocess")', '1 + 1'];
  fc.assert(
    fc.property(fc.constantFrom(...INTERPRETERS), fc.boolean(), fc.nat(), fc.integer({ min: 1, max: 2 }), (name, attack, pick, how) => {
      const code = attack ? attacks[pick % attacks.length] : benign[pick % benign.length];
      const quoted = how === 1 ? `'${code}'` : `"${code.replace(/[\\"$`]/g, (c) => `\\${c}`)}"`;
      const d = decide(`${name} ${flagFor(name)} ${quoted}`);
      // Confined, the sandbox decides; with the guard alone, code that starts git is refused for what it is.
      const alone = guardVerdict(d, { confined: false });
      const ok =
        outcome(d) === 'unsure' && (attack ? !alone.allowed && alone.reason === 'inline_interpreter' : !alone.allowed && alone.reason === 'guard_cannot_judge');
      if (!ok) t.log(`${name} ${flagFor(name)} ${quoted}: ${show(d)}`);
      return ok;
    }),
    { numRuns: 400, seed: 20261007 },
  );
  t.pass();
});

/**
 * Real bash: random `cd` sequences (some to directories that do not exist) followed by `git status`. Whenever the
 * guard allows the list, the directory git really ran in (a stub git records $PWD) is inside the worktree.
 */
test('property: after cds that may fail, git runs where the guard thinks (real bash, stub git)', (t) => {
  const root = mkdtempSync(join(tmpdir(), 'orchard-guard-cd-'));
  try {
    const stub = join(root, 'bin');
    const log = join(root, 'git.log');
    const worktree = join(root, 'wt', 's1');
    mkdirSync(join(worktree, 'a', 'b'), { recursive: true });
    mkdirSync(join(root, 'wt', 'a'), { recursive: true });
    mkdirSync(stub, { recursive: true });
    writeFileSync(join(stub, 'git'), `#!/bin/bash\nprintf '%s\\n' "$PWD" >> '${log}'\n`);
    chmodSync(join(stub, 'git'), 0o755);
    const ctx = { branch: BRANCH, worktree, isolated: true };
    const steps = ['cd a', 'cd missing', 'cd ..', 'cd a/b', 'cd ../..', 'pushd a >/dev/null', 'popd >/dev/null', '(cd ..)', 'cd . ', 'set -e', 'cd b'];
    const seps = ['; ', ' && ', ' || ', '\n'];
    let allowed = 0;
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.constantFrom(...steps), fc.constantFrom(...seps)), { minLength: 1, maxLength: 5 }), (parts) => {
        const command = `${parts.map(([s, sep]) => s + sep).join('')}git status`;
        const d = decideCommand(parser, command, ctx);
        if (!d.allowed) return true;
        allowed++;
        writeFileSync(log, '');
        spawnSync('bash', ['-c', command], { cwd: worktree, env: { PATH: `${stub}:/usr/bin:/bin`, HOME: root }, timeout: 3000, stdio: 'ignore' });
        const dirs = readFileSync(log, 'utf8').split('\n').filter(Boolean);
        const outside = dirs.filter((dir) => dir !== worktree && !dir.startsWith(`${worktree}/`));
        if (outside.length > 0) t.log(`allowed ${JSON.stringify(command)}, but git ran in ${outside.join(', ')}`);
        return outside.length === 0;
      }),
      { numRuns: 400, seed: 20261008 },
    );
    t.log(`${allowed} allowed cd sequences run through bash`);
    t.true(allowed > 20);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
});

// ---------------------------------------------------------------------------------------------------------------
// The unsure channel as the bash tool and the operator see it.

test('guardVerdict: confined, an unsure command stays allowed with its notes; unconfined, it is refused as guard_cannot_judge', (t) => {
  const d = decide('npm test');
  t.true(d.allowed && (d.unsure?.length ?? 0) > 0, show(d));
  t.is(guardVerdict(d, { confined: true }), d);
  const alone = guardVerdict(d, { confined: false });
  if (alone.allowed) return t.fail('allowed without the sandbox');
  t.is(alone.reason, 'guard_cannot_judge');
  t.is(alone.refused, 'npm test');
  t.regex(alone.instead, /ORCHARD_SANDBOX/);
});

test('guardVerdict leaves clean allows and refusals alone', (t) => {
  for (const command of ['git status', 'git merge main']) {
    const d = decide(command);
    t.deepEqual(guardVerdict(d, { confined: false }), d, command);
    t.deepEqual(guardVerdict(d, { confined: true }), d, command);
  }
});

test('formatUnsure lists each thing the guard could not judge once, and nothing for a clean decision', (t) => {
  const d = decide('npm test; npm test; python3 -c "print(1)"');
  if (!d.allowed) return t.fail(show(d));
  const text = formatUnsure(d);
  const lines = text.split('\n');
  t.regex(lines[0], /could not judge.*the sandbox decides/);
  t.is(lines.filter((l) => l.includes('`npm`')).length, 1, text);
  t.true(
    lines.some((l) => l.includes('inline `python` code')),
    text,
  );
  t.is(formatUnsure(decide('git status')), '');
  t.is(formatUnsure(decide('git merge main')), '');
});

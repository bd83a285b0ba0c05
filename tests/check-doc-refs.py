#!/usr/bin/env python3
"""Every `docs/…` path cited in the sources exists, and every section cited with it
(`docs/npu-xrt.md §1a, §1d`, `docs/npu-kernels.md "What matters"`,
`docs/style.md rule 10`) is a heading (or numbered rule) of that file.

Usage: check-doc-refs.py SOURCE_ROOT     check the tree (exit 1 on a bad citation)
       check-doc-refs.py --self-test     check the checker on a made-up tree

The files checked are the tracked ones (git ls-files; a walk of the tree when git
is not there) that are code, build or shell files, plus README.md and the project's
own documents in docs/ (DESIGN.md, api.md, performance.md, usage.md). The reference
notes in docs/ are not checked: they quote other projects' paths (e.g. another
project's docs/…)."""
import os
import re
import subprocess
import sys
import tempfile

CODE_EXT = ('.c', '.h', '.cpp', '.py', '.sh', '.mjs', '.in')
CODE_NAMES = ('meson.build', 'meson_options.txt', 'run', 'README.md', 'DESIGN.md')
SKIP_DIRS = ('.git', 'node_modules', 'subprojects')
OWN_DOCS = ('docs/DESIGN.md', 'docs/api.md', 'docs/performance.md', 'docs/usage.md')

PATH_RE = re.compile(r'(?<![\w/.-])docs/((?:[\w.-]+/)*[\w.-]+\.md)\b')
# Comment continuations inside a citation that wraps: "docs/x.md\n * §3.4".
WRAP_RE = re.compile(r'\s*\n\s*(?:\*(?!/)|//+|#+)?\s*')
SECTION_RE = re.compile(r'§\s*([0-9][0-9A-Za-z]*(?:\.[0-9A-Za-z]+)*)|"([^"\n]+)"|rule\s+(\d+)')
SEP_RE = re.compile(r'\s*(?:,|and)?\s*')


def tracked_files(root):
    try:
        out = subprocess.run(['git', '-C', root, 'ls-files', '-z'], check=True,
                             capture_output=True).stdout.decode()
        files = [f for f in out.split('\0') if f]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for d, dirs, names in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = [x for x in dirs
                   if x not in SKIP_DIRS and not (rel == '.' and x.startswith('build'))]
        files += [os.path.normpath(os.path.join(rel, n)) for n in names]
    return files


def wanted(rel):
    base = os.path.basename(rel)
    if base == os.path.basename(__file__):   # its own examples are not citations
        return False
    if rel.startswith('docs/'):
        return rel in OWN_DOCS
    return rel.endswith(CODE_EXT) or base in CODE_NAMES


def headings(path):
    """The file's headings, and its numbered rules as "rule N"."""
    with open(path, encoding='utf-8') as f:
        text = f.read()
    return ([m.group(1).strip() for m in re.finditer(r'^#{1,6}\s+(.*)$', text, re.M)] +
            ['rule ' + m.group(1) for m in re.finditer(r'^(\d+)\. ', text, re.M)])


def has_section(heads, sec):
    """§3.9 is a heading that starts "3.9 " or "3.9. "; §1a one that starts "1a."."""
    return any(re.match(re.escape(sec) + r'(?:\.|\s|$)', h) for h in heads)


def citations(text):
    """(line, path, [sections]) for each docs/ path in text."""
    for m in PATH_RE.finditer(text):
        line = text.count('\n', 0, m.start()) + 1
        rest = WRAP_RE.sub(' ', text[m.end():m.end() + 200])
        secs, pos = [], 0
        while True:
            s = SEP_RE.match(rest, pos)
            pos2 = s.end() if s else pos
            t = SECTION_RE.match(rest, pos2)
            if not t:
                break
            if t.group(1):
                secs.append(('§', t.group(1).rstrip('.')))
            elif t.group(2):
                secs.append(('"', t.group(2)))
            else:
                secs.append(('rule', t.group(3)))
            pos = t.end()
        yield line, m.group(1), secs


def check(root):
    problems, n_cites = [], 0
    cache = {}
    for rel in tracked_files(root):
        if not wanted(rel):
            continue
        full = os.path.join(root, rel)
        try:
            with open(full, encoding='utf-8') as f:
                text = f.read()
        except (OSError, UnicodeDecodeError):
            continue
        for line, doc, secs in citations(text):
            n_cites += 1
            where = '%s:%d: docs/%s' % (rel, line, doc)
            target = os.path.join(root, 'docs', doc)
            if not os.path.isfile(target):
                problems.append(where + ' does not exist')
                continue
            if target not in cache:
                cache[target] = headings(target)
            for kind, sec in secs:
                heads = cache[target]
                if kind == '§':
                    ok, name = has_section(heads, sec), '§' + sec
                elif kind == 'rule':
                    ok, name = 'rule ' + sec in heads, 'rule ' + sec
                else:
                    ok, name = any(sec in h for h in heads), '"%s"' % sec
                if not ok:
                    problems.append('%s has no section %s' % (where, name))
    return problems, n_cites


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, 'docs'))
        os.makedirs(os.path.join(root, 'src'))
        with open(os.path.join(root, 'docs', 'a.md'), 'w') as f:
            f.write('# A\n## What matters\n## 1. One\n### 1a. Sub\n### 3.9 Q4NX\n'
                    '1. **A rule.**\n')
        with open(os.path.join(root, 'src', 'x.c'), 'w') as f:
            f.write('/* docs/a.md §1a, §3.9 and "What matters"; see docs/a.md\n'
                    ' * §1. Good. */\n'
                    '/* docs/b.md */\n'
                    '/* docs/a.md §2, §1a */\n'
                    '/* docs/a.md "Nothing" */\n'
                    '/* docs/a.md rule 1, and docs/a.md rule 2 */\n'
                    '/* other/docs/z.md is not ours */\n')
        problems, n = check(root)
        want = ['src/x.c:3: docs/b.md does not exist',
                'src/x.c:4: docs/a.md has no section §2',
                'src/x.c:5: docs/a.md has no section "Nothing"',
                'src/x.c:6: docs/a.md has no section rule 2']
        if problems != want or n != 7:
            print('self-test failed: %d citations, problems:\n  %s' %
                  (n, '\n  '.join(problems)))
            return 1
    print('self-test ok')
    return 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    if len(argv) != 2:
        print(__doc__)
        return 2
    problems, n = check(argv[1])
    if n == 0:
        print('no docs/ citation found under %s: is this the source tree?' % argv[1])
        return 1
    for p in problems:
        print(p)
    print('%d docs/ citations, %d problems' % (n, len(problems)))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

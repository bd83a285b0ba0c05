#!/usr/bin/env python3
"""No source file cites an issue by its number (the word "issue" or "issues",
then a number, with or without '#'): the tracker is not part of the repository,
so such a citation tells a reader nothing. A comment says why the code is as it is; git keeps the history.

Usage: check-issue-refs.py SOURCE_ROOT     check the tree (exit 1 on a citation)
       check-issue-refs.py --self-test     check the checker on a made-up tree

The files checked are the tracked ones (git ls-files; a walk of the tree when git
is not there) that are C, C++, Python, shell or build files."""
import os
import re
import subprocess
import sys
import tempfile

CODE_EXT = ('.c', '.h', '.cpp', '.py', '.sh', '.mjs', '.in')
CODE_NAMES = ('meson.build', 'meson_options.txt', 'run')
SKIP_DIRS = ('.git', 'node_modules', 'subprojects')

# The word, singular or plural, any case, then spaces, '#' or '-' and a number;
# not the same letters inside a longer word ("issued", "tissue").
ISSUE_RE = re.compile(r'(?<![\w-])issues?[\s#-]*#?\d+', re.IGNORECASE)


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
    if any(part in SKIP_DIRS for part in rel.split(os.sep)):
        return False
    return rel.endswith(CODE_EXT) or base in CODE_NAMES


def check(root):
    problems, n_files = [], 0
    for rel in sorted(tracked_files(root)):
        if not wanted(rel):
            continue
        path = os.path.join(root, rel)
        try:
            with open(path, encoding='utf-8', errors='replace') as f:
                text = f.read()
        except OSError:
            continue
        n_files += 1
        for m in ISSUE_RE.finditer(text):
            line = text.count('\n', 0, m.start()) + 1
            problems.append('%s:%d: cites "%s"' % (rel, line, ' '.join(m.group(0).split())))
    return problems, n_files


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, 'src'))
        with open(os.path.join(root, 'src', 'x.c'), 'w') as f:
            # {w} is the word, so that this file cites nothing itself
            f.write('/* Bounded ({w} 14, item 1): why. */\n'
                    '/* The t{w} 4 and an {w}d 3 are not citations. */\n'
                    '/* {W} #7 */\n'.format(w='issue', W='Issue'))
        with open(os.path.join(root, 'src', 't.py'), 'w') as f:
            f.write('"""{W} 13\'s bars."""\n# {w}s 13 and 14\n'.format(w='issue', W='Issue'))
        with open(os.path.join(root, 'src', 'notes.md'), 'w') as f:
            f.write('{w} 9 (not a source file)\n'.format(w='issue'))
        problems, n = check(root)
        want = [s.format(w='issue', W='Issue') for s in
                ('src/t.py:1: cites "{W} 13"', 'src/t.py:2: cites "{w}s 13"',
                 'src/x.c:1: cites "{w} 14"', 'src/x.c:3: cites "{W} #7"')]
        if problems != want or n != 2:
            print('self-test failed: %d files, problems:\n  %s' % (n, '\n  '.join(problems)))
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
        print('no source file found under %s: is this the source tree?' % argv[1])
        return 1
    for p in problems:
        print(p)
    print('%d source files, %d issue citations' % (n, len(problems)))
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

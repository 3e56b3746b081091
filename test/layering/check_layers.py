#!/usr/bin/env python3
"""Checks that every #include in the source tree goes down the layers.

Usage: check_layers.py ROOT TABLE   checks the tree at ROOT against TABLE
       check_layers.py TABLE        the same for the tree TABLE lives in
                                    (test/layering/layers.txt, followed
                                    through Bazel's runfiles link)
       check_layers.py --self-test  checks that a fake tree's bad edges are
                                    reported and its good ones are not

The table (layers.txt) lists, per folder, the folders whose headers its
sources may include. Exit status 1 and one line per offending include when
an include crosses a layer the wrong way.
"""

import os
import re
import sys
import tempfile

SOURCE_SUFFIXES = ('.h', '.hpp', '.cpp', '.cc', '.cu', '.cuh', '.inc')
# Folders with no project sources of their own to check (build rules,
# stand-ins for Bazel's rules, example programs, Bazel's output links).
SKIPPED = ('bazel', 'third_party', 'examples', 'grammar')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_table(path):
    """Returns {folder or file: set of folders it may include, or None for
    everything}."""
    table = {}
    with open(path) as file:
        for number, line in enumerate(file, 1):
            line = line.split('#', 1)[0].strip()
            if not line:
                continue
            if ':' not in line:
                sys.exit('%s:%d: expected "FOLDER: FOLDERS"' % (path, number))
            key, allowed = line.split(':', 1)
            allowed = allowed.split()
            table[key.strip().rstrip('/')] = (None if allowed == ['*'] else
                                              set(a.rstrip('/')
                                                  for a in allowed))
    return table


def is_file_entry(key):
    return bool(os.path.splitext(key)[1])


def covers(folder, path):
    return path == folder or path.startswith(folder + '/')


def folder_of(path, table):
    """The longest folder of the table that contains `path`, or None."""
    best = None
    for key in table:
        if is_file_entry(key):
            continue
        if (path == key or path.startswith(key + '/')) and (
                best is None or len(key) > len(best)):
            best = key
    return best


def project_folders(root):
    return {entry for entry in os.listdir(root)
            if os.path.isdir(os.path.join(root, entry))
            and not entry.startswith(('.', 'bazel-'))}


def check(root, table):
    """Returns the list of violations (strings) in the tree at `root`."""
    problems = []
    tops = project_folders(root)
    for top in sorted(tops):
        if top in SKIPPED:
            continue
        for directory, subdirs, files in os.walk(os.path.join(root, top)):
            subdirs.sort()
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.relpath(os.path.join(directory, name), root)
                source = folder_of(path, table)
                if source is None:
                    problems.append('%s: its folder is not in the layer table'
                                    % path)
                    continue
                allowed = table[source]
                if allowed is None:
                    continue
                extra = table.get(path, set())
                with open(os.path.join(root, path), errors='replace') as file:
                    for number, line in enumerate(file, 1):
                        match = INCLUDE.match(line)
                        if not match or '/' not in match.group(1):
                            continue
                        included = match.group(1)
                        if included.split('/', 1)[0] not in tops:
                            continue  # a library's header (llvm/, gtest/)
                        target = folder_of(included, table)
                        if target is None:
                            problems.append(
                                '%s:%d: includes "%s", whose folder is not '
                                'in the layer table' % (path, number,
                                                        included))
                        elif not covers(source, target) and not any(
                                covers(folder, target)
                                for folder in allowed | extra):
                            problems.append(
                                '%s:%d: includes "%s": %s may not depend '
                                'on %s' % (path, number, included, source,
                                           target))
    return problems


def self_test():
    """A fake tree with bad edges (ir -> passes, rt/kv -> rt: a subfolder
    up to its parent), an unlisted folder, and good edges (a folder to its
    subfolder, a file's own exception)."""
    files = {
        'layers.txt': ('passes: ir\nir:\nrt: ir\nrt/kv:\ntest: *\n'
                       'ir/Ok.h: rt\n'),
        'ir/Ok.h': '#include "rt/kv/Cache.h"\n',
        'rt/kv/Cache.h': '#include "rt/Engine.h"\n',
        'rt/Engine.h': '#include "rt/kv/Cache.h"\n#include "ir/Op.h"\n',
        'ir/Op.h': '#include "ir/Type.h"\n#include "llvm/ADT/StringRef.h"\n',
        'ir/Type.h': '#include "passes/Pass.h"\n',
        'passes/Pass.h': '#include "ir/Op.h"\n',
        'test/PassTest.cpp': '#include "passes/Pass.h"\n#include "ir/Op.h"\n',
        'orphan/Thing.h': '\n',
    }
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)),
                        exist_ok=True)
            with open(os.path.join(root, path), 'w') as file:
                file.write(text)
        problems = check(root, read_table(os.path.join(root, 'layers.txt')))
    expected = [
        'ir/Type.h:1: includes "passes/Pass.h": ir may not depend on passes',
        'rt/kv/Cache.h:1: includes "rt/Engine.h": rt/kv may not depend on rt',
        'orphan/Thing.h: its folder is not in the layer table',
    ]
    if sorted(problems) != sorted(expected):
        print('self-test failed; got:\n  ' + '\n  '.join(problems))
        return 1
    print('self-test passed: the bad edges and the unlisted folder are '
          'reported, the good edges are not')
    return 0


def main(argv):
    if argv[1:] == ['--self-test']:
        return self_test()
    if len(argv) == 2:
        # The test reads the source tree, which Bazel cannot list as its
        # inputs across packages: the table's runfile links to the tree.
        table_path = argv[1]
        root = os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.realpath(table_path))))
    elif len(argv) == 3:
        root, table_path = argv[1], argv[2]
    else:
        sys.exit(__doc__)
    problems = check(root, read_table(table_path))
    for problem in problems:
        print(problem)
    if problems:
        print('%d include(s) cross a layer the wrong way; see %s' %
              (len(problems), table_path))
        return 1
    print('every include goes down the layers of %s' % table_path)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

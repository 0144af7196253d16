import subprocess
import sys

import legorl


def test_every_public_name_resolves():
    for name in legorl.__all__:
        assert getattr(legorl, name) is not None, name


def test_import_and_help_do_not_load_torch():
    code = "import sys, legorl, legorl.cli; assert 'torch' not in sys.modules, 'torch imported eagerly'"
    subprocess.run([sys.executable, "-c", code], check=True)

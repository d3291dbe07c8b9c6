"""Print the project's requirements (and those of the extras named on the command line), one a line.

The images install these before copying the sources, so a change of code reuses the cached
dependency layer (``pip install -r`` of this output, then ``pip install --no-deps`` of the project).
"""

import sys
import tomllib

with open(sys.argv[1], "rb") as f:
    project = tomllib.load(f)["project"]
wanted = list(project["dependencies"]) if "--no-core" not in sys.argv else []
for extra in (a for a in sys.argv[2:] if not a.startswith("--")):
    wanted += project["optional-dependencies"][extra]
print("\n".join(dict.fromkeys(wanted)))

"""A "clean up temp files" tool, as an AI agent would call it: it removes the workspace's
temp folder recursively. This is the seed incident's shape: a plausible request, a recursive
delete, and no idea what else lives under that folder."""
import os
import shutil

target = os.path.join(os.getcwd(), "temp")
print(f"cleaning up {target} ...")
removed = 0
for root, dirs, files in os.walk(target):
    removed += len(files)
shutil.rmtree(target)
print(f"removed {removed} files")

import sys

sys.path.append("/app")

import sys

# the code under test lives in /app; appended, so it cannot shadow the standard library
sys.path.append("/app")

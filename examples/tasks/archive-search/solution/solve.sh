#!/bin/bash
cd /app/data && grep -rlw needle . | sed 's|^\./||' > /app/answer.txt

#!/bin/bash
printf '[app]\nmode = %s\nport = %s\n' "$APP_MODE" "$APP_PORT" > settings.ini

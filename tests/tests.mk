check:
	@echo "no tests yet"

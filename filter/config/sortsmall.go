package config

// insertionSort sorts the n elements that less and swap index, stably. The configuration
// sorts only short lists (at most MaxRules rules, MaxOverrides overrides, maxDenyHeaders
// headers, a header matcher's few fields), and only while parsing or writing it, so the
// quadratic comparisons cost nothing that matters, while sort.Slice and slices.Sort would
// link a pattern-defeating quicksort (and sort.Slice reflection's Swapper) for each shape:
// replacing them took 58,905 bytes off the module.
func insertionSort(n int, less func(i, j int) bool, swap func(i, j int)) {
	for i := 1; i < n; i++ {
		for j := i; j > 0 && less(j, j-1); j-- {
			swap(j, j-1)
		}
	}
}

// sortStrings sorts s in increasing byte order, as slices.Sort does.
func sortStrings(s []string) {
	insertionSort(len(s), func(i, j int) bool { return s[i] < s[j] },
		func(i, j int) { s[i], s[j] = s[j], s[i] })
}
